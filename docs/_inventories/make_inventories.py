"""Writes the intersphinx inventories that ``docs/conf.py`` reads in place of the libraries' own.

The API reference links the names it shares with JAX, Flax, Optax, Rax, NumPy and Python (type annotations such as
``jax.Array``, references such as :func:`rax.softmax_loss`) to those projects' documentation sites. Sphinx finds
where a site documents a name in the site's ``objects.inv``; downloading it needs a network, and a failed download
is a warning that fails the ``-W`` build. So the build reads the small inventories in this directory, written by
this script: one per site, listing the names this documentation references, each with the page and anchor where
that site documents it (:data:`INVENTORIES`). A reference to one of these libraries that no inventory lists fails
the build (``docs/conf.py``'s ``nitpicky``); add the name to :data:`INVENTORIES` and run this script.

Run from the repository root: ``python docs/_inventories/make_inventories.py`` (``tests/test_docs.py`` checks that
the committed files are what it writes).

The format is Sphinx's inventory version 2: four header lines, then zlib-compressed lines
``name domain:role priority uri display-name`` (``-``: the display name is the name).
"""

import os
import zlib

_HERE = os.path.dirname(os.path.abspath(__file__))


def _jax_page(name: str) -> str:
  """A JAX name with a page of its own (``jax.jit``, ``jax.numpy.where``, ``jax.Array``)."""
  return f"_autosummary/{name}.html#{name}"


def _section(page: str):
  """A name documented on a page that holds a whole module or theme (``page#name``)."""
  return lambda name: f"{page}#{name}"


# name -> (project, base URL, [(name, role, uri_of(name))]); a role is the Python domain's object type.
INVENTORIES = {
  "jax": (
    "JAX",
    "https://docs.jax.dev/en/latest/",
    [
      ("jax.Array", "class", _jax_page),
      ("jax.Device", "class", _jax_page),
      ("jax.sharding.Mesh", "class", _section("jax.sharding.html")),
      ("jax.jit", "function", _jax_page),
      ("jax.vmap", "function", _jax_page),
      ("jax.grad", "function", _jax_page),
      ("jax.lax.scan", "function", _jax_page),
      ("jax.ops.segment_sum", "function", _jax_page),
      ("jax.scipy.special.log_ndtr", "function", _jax_page),
    ],
  ),
  "flax": (
    "Flax",
    "https://flax-linen.readthedocs.io/en/latest/",
    [
      ("flax.linen.Module", "class", _section("api_reference/flax.linen/module.html")),
      ("flax.linen.Dense", "class", _section("api_reference/flax.linen/layers.html")),
      ("flax.linen.LayerNorm", "class", _section("api_reference/flax.linen/layers.html")),
      ("flax.linen.Dropout", "class", _section("api_reference/flax.linen/layers.html")),
      ("flax.struct.PyTreeNode", "class", _section("api_reference/flax.struct.html")),
    ],
  ),
  "optax": (
    "Optax",
    "https://optax.readthedocs.io/en/latest/",
    [
      ("optax.GradientTransformation", "class", _section("api/transformations.html")),
      ("optax.adam", "function", _section("api/optimizers.html")),
      ("optax.adamw", "function", _section("api/optimizers.html")),
      ("optax.sgd", "function", _section("api/optimizers.html")),
    ],
  ),
  "rax": (
    "Rax",
    "https://rax.readthedocs.io/en/latest/",
    [
      (name, "function", _section("api.html"))
      for name in (
        "rax.softmax_loss",
        "rax.pointwise_sigmoid_loss",
        "rax.pairwise_logistic_loss",
        "rax.mrr_metric",
        "rax.precision_metric",
        "rax.ap_metric",
        "rax.dcg_metric",
        "rax.ndcg_metric",
        "rax.dcg_lambdaweight",
        "rax.utils.ranks",
      )
    ],
  ),
  "numpy": (
    "NumPy",
    "https://numpy.org/doc/stable/",
    [
      ("numpy.ndarray", "class", lambda name: f"reference/generated/{name}.html#{name}"),
      ("numpy.random.Generator", "class", _section("reference/random/generator.html")),
      # the scalar types in jax.typing.ArrayLike, which annotates the functions that take NumPy arrays too
      ("numpy.bool", "class", _section("reference/arrays.scalars.html")),
      ("numpy.number", "class", _section("reference/arrays.scalars.html")),
    ],
  ),
  "python": (
    "Python",
    "https://docs.python.org/3/",
    [(name, "class", _section("library/functions.html")) for name in ("bool", "float", "int", "object", "type")]
    + [(name, "class", _section("library/stdtypes.html")) for name in ("dict", "list", "str", "tuple")]
    + [("None", "data", _section("library/constants.html"))]
    + [
      (name, "exception", _section("library/exceptions.html"))
      for name in ("FileNotFoundError", "FloatingPointError", "KeyError", "NotImplementedError", "ValueError")
    ]
    + [
      (
        f"typing.{name}",
        "data" if name in ("Any", "Callable", "ClassVar", "Optional", "Union") else "class",
        _section("library/typing.html"),
      )
      for name in (
        "Any",
        "Callable",
        "ClassVar",
        "Iterable",
        "Iterator",
        "Mapping",
        "NamedTuple",
        "Optional",
        "Protocol",
        "Sequence",
        "Union",
      )
    ]
    + [
      ("os.PathLike", "class", _section("library/os.html")),
      ("pathlib.Path", "class", _section("library/pathlib.html")),
      ("types.ModuleType", "class", _section("library/types.html")),
    ],
  ),
}


def inventory_bytes(project: str, entries) -> bytes:
  """The ``objects.inv`` (version 2) of ``project`` listing ``entries``, sorted by name.

  Args:
    project: the project's name, as its own inventory states it.
    entries: ``(name, role, uri_of)`` triples: a Python-domain object type and a function of the name that gives the
      page and anchor relative to the site's base URL.

  Returns:
    The file's bytes: the header, then the compressed entry lines.
  """
  header = f"# Sphinx inventory version 2\n# Project: {project}\n# Version: \n"  # no version: "(in JAX)"
  header += "# The remainder of this file is compressed using zlib.\n"
  lines = "".join(f"{name} py:{role} 1 {uri_of(name)} -\n" for name, role, uri_of in sorted(entries))
  return header.encode("utf-8") + zlib.compress(lines.encode("utf-8"), 9)


def inventory_path(name: str) -> str:
  """The path of inventory ``name``'s file (``docs/_inventories/<name>.inv``)."""
  return os.path.join(_HERE, f"{name}.inv")


def main() -> None:
  """Writes every inventory of :data:`INVENTORIES` beside this script."""
  for name, (project, _, entries) in INVENTORIES.items():
    with open(inventory_path(name), "wb") as f:
      f.write(inventory_bytes(project, entries))


if __name__ == "__main__":
  main()
