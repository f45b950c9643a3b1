"""Sphinx configuration for ultr_jax's documentation.

Build: ``pip install -e ".[docs]" && sphinx-build -W --keep-going -b html docs docs/_build/html``.

At configuration time this file writes ``docs/api/<package>.rst`` with one ``autosummary`` list per theme (the
module that defines a name) of each public package's ``__all__`` (so a name added later is documented without
editing the docs), and copies the Colab notebooks from ``colab/`` into ``docs/notebooks/`` (rendered with their stored
outputs, never executed). Both are build outputs and ignored by git.
"""

import importlib
import os
import pkgutil
import re
import shutil
import sys

import docutils.nodes
import docutils.statemachine
from sphinx.util.docutils import SphinxDirective

import sphinx.ext.autosummary as _autosummary

_DOCS = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_DOCS)
sys.path.insert(0, _ROOT)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# The packages whose ``__all__`` makes the API reference (tests/test_docs.py checks every name has an entry).
API_PACKAGES = ("data", "simulation", "metrics", "graph", "evaluation", "losses", "models", "train", "studies", "types")
_API_DIR = os.path.join(_DOCS, "api")
_NOTEBOOK_DIR = os.path.join(_DOCS, "notebooks")


def _write_if_changed(path, text):
  """Writes ``text`` unless the file already holds it (keeps Sphinx's incremental builds incremental)."""
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      if f.read() == text:
        return
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def _defining_module(package, name, obj):
  """The ``ultr_jax.<package>.<module>`` that defines ``obj`` (a constant: the submodule holding that object)."""
  module = getattr(obj, "__module__", None) if callable(obj) else None
  if module is None and hasattr(package, "__path__"):
    for info in pkgutil.iter_modules(package.__path__):
      sub = importlib.import_module(f"{package.__name__}.{info.name}")
      if getattr(sub, name, None) is obj:
        module = sub.__name__
        break
  if module is None or not module.startswith(package.__name__ + ".") or module.split(".")[2].startswith("_"):
    return package.__name__
  return ".".join(module.split(".")[:3])


def _theme(module_name):
  """A section title from the module docstring's first line: up to its first colon, without roles or asides."""
  doc = (importlib.import_module(module_name).__doc__ or "").strip()
  if not doc:
    return module_name
  title = re.sub(r":math:`[^`]*`", "", doc.splitlines()[0])
  title = re.sub(r":\w+:`~?([^`]*)`", lambda m: m.group(1).split(".")[-1], title)  # :class:`X` -> X
  title = re.sub(r"\s*\([^)]*\)", "", title.replace("``", "").replace("\\ ", ""))  # asides in parentheses
  return " ".join(title.split(": ")[0].rstrip(".").split())


def _api_sections(package):
  """``[(title, names)]``: the package's ``__all__`` grouped by the module that defines each name.

  A module is a theme (its docstring's first line is the section's title), as rax's and optax's references
  group by theme; the sections come in the order of ``__all__``, the names inside one sorted.
  """
  groups = {}
  for name in package.__all__:
    groups.setdefault(_defining_module(package, name, getattr(package, name)), []).append(name)
  return [
    (
      _theme(module) if module != package.__name__ or not hasattr(package, "__path__") else "Shared definitions",
      sorted(names, key=str.lower),
    )
    for module, names in groups.items()
  ]


def _write_api_pages():
  """One page per package: its docstring, then one autosummary table per theme (:func:`_api_sections`).

  The names' own pages are generated from a separate orphan page (``api/pages.rst``), so they stay out of the
  sidebar's navigation tree: the theme renders that whole tree into every page, and with each of several hundred
  names in it, that rendering was most of the build's time. A reader reaches a name's page from its package's
  table, as in optax's and rax's references.
  """
  os.makedirs(_API_DIR, exist_ok=True)
  pages = [":orphan:", "", "Every API page", "==============", ""]
  for package in API_PACKAGES:
    module = importlib.import_module(f"ultr_jax.{package}")
    title = f"ultr_jax.{package}"
    lines = [title, "=" * len(title), "", f".. automodule:: ultr_jax.{package}", "   :no-members:", ""]
    lines += [f".. currentmodule:: ultr_jax.{package}", ""]
    pages += [f".. currentmodule:: ultr_jax.{package}", "", ".. autosummary::", "   :toctree: generated", ""]
    for section, names in _api_sections(module):
      lines += [section, "-" * len(section), "", ".. autosummary::", ""]
      lines += [f"   {name}" for name in names] + [""]
      pages += [f"   {name}" for name in names]
    pages += [""]
    _write_if_changed(os.path.join(_API_DIR, f"{package}.rst"), "\n".join(lines) + "\n")
  _write_if_changed(os.path.join(_API_DIR, "pages.rst"), "\n".join(pages) + "\n")
  index = [
    "API reference",
    "=============",
    "",
    "Every name in each public package's ``__all__``, grouped by theme.",
    "",
    ".. toctree::",
    "   :maxdepth: 2",
    "",
  ] + [f"   {package}" for package in API_PACKAGES]
  _write_if_changed(os.path.join(_API_DIR, "index.rst"), "\n".join(index) + "\n")


def _copy_notebooks():
  """Copies ``colab/*.ipynb`` beside the notebooks' index page (the index itself is tracked)."""
  source = os.path.join(_ROOT, "colab")
  for name in sorted(os.listdir(source)):
    if name.endswith(".ipynb"):
      target = os.path.join(_NOTEBOOK_DIR, name)
      if not os.path.exists(target) or os.path.getmtime(target) < os.path.getmtime(os.path.join(source, name)):
        shutil.copy2(os.path.join(source, name), target)


_write_api_pages()
_copy_notebooks()

project = "ultr_jax"
copyright = "the ultr_jax authors"  # pylint: disable=redefined-builtin
author = "the ultr_jax authors"
release = importlib.import_module("ultr_jax").__version__

extensions = [
  "myst_nb",
  "sphinx.ext.autodoc",
  "sphinx.ext.autosummary",
  "sphinx.ext.intersphinx",
  "sphinx.ext.napoleon",
  "sphinx.ext.viewcode",
  "sphinxcontrib.katex",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# Notebooks render with the outputs stored in them; nothing runs at build time.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# Names of JAX, Flax, Optax, Rax, NumPy and Python link to those projects' sites, located through the small
# inventories in _inventories/ (written by its make_inventories.py, which lists the names this site references): the
# build reads no inventory over the network, so it runs offline and a failed download cannot fail -W.
sys.path.insert(0, os.path.join(_DOCS, "_inventories"))
import make_inventories  # pylint: disable=g-import-not-at-top,wrong-import-position

intersphinx_mapping = {
  name: (base_url, make_inventories.inventory_path(name))
  for name, (_, base_url, _) in make_inventories.INVENTORIES.items()
}

# An annotation names a class where Python finds it (jax.Array is jaxlib's, a Flax module's base is
# flax.linen.module.Module); its library documents it under its public name, which the inventories list.
_PUBLIC_NAMES = {
  ("jax", "Array"): "jax.Array",
  ("jaxlib", "Array"): "jax.Array",
  ("jax", "Device"): "jax.Device",
  ("jaxlib", "Device"): "jax.Device",
  ("jax", "Mesh"): "jax.sharding.Mesh",
  ("flax", "Module"): "flax.linen.Module",
  ("optax", "GradientTransformation"): "optax.GradientTransformation",
  ("numpy", "Generator"): "numpy.random.Generator",
}

# Broken cross-references are errors (with -W), except those the site cannot resolve by design: other libraries'
# objects without a site in the inventories (orbax, ml_collections, ...) or private to a library, names in the
# docstrings' type fields that are not Python names, and the packages' submodules and helper modules (the reference
# documents each package's __all__, not its module tree). A reference into jax, flax, optax, rax or numpy must
# resolve: a name missing from _inventories/make_inventories.py fails the build.
_LINKED = r"(jax|jaxlib|flax|optax|rax|numpy)\."
nitpicky = True
nitpick_ignore_regex = [
  ("py:class", rf"(?!ultr_jax\.|{_LINKED}).*"),
  ("py:class", rf"{_LINKED}([\w.]*\.)?_[\w.]*"),  # a library's private class (under "Bases", in an annotation)
  (r"py:\w+", r"(jnp|nn|np|orbax|scipy|ml_collections|absl|pyarrow|grain)(\..*)?"),
  ("py:mod", r"ultr_jax\.(types|testing|\w+\.[\w.]+)"),
  ("py:class", r"ultr_jax\.[\w.]+\._\w+"),  # a private base class (shown under "Bases")
  ("py:class", r"ultr_jax\.simulation\.click_models\.base\.ItemStatistics"),  # the item models' internal mixin
  ("py:class", r"ultr_jax\.simulation\.click_models\.base\.Session"),  # ClickModel.session's internal state
  ("py:class", r"ultr_jax\.simulation\.click_models\.tables\.\w+"),  # the minibatch fit's table types
  # the shared base modules below the packages (the workdir lock and its error, the side-file reader, the config
  # rules), private: referenced from the public docstrings, not documented themselves
  (r"py:\w+", r"ultr_jax\._(workdir|state_files|schema)(\..*)?"),
]

autosummary_generate = True
# A summary is the docstring's first sentence; the period of "Eq. 3" or "Fig. 4" does not end one.
_autosummary.WELL_KNOWN_ABBREVIATIONS = (*_autosummary.WELL_KNOWN_ABBREVIATIONS, "Eq.", "Eqs.", "Sec.", "Fig.", "Prop.")
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "description"
# Types go beside the documented arguments only (the docstrings often document several arguments on one line).
autodoc_typehints_description_target = "documented"
autodoc_member_order = "bysource"
# Methods inherited from flax or Python keep their own docs there (flax's Module.setup docstring is not ours).
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# NamedTuple fields listed under "Attributes:" become :ivar: fields, not second descriptions of the members.
napoleon_use_ivar = True


def _attribute_doc(package: str, name: str) -> list:
  """The ``#:`` doc comment of ``name`` in the submodule of ``package`` that assigns it (private ones too)."""
  from sphinx.pycode import ModuleAnalyzer  # pylint: disable=g-import-not-at-top

  module = importlib.import_module(package)
  for info in pkgutil.walk_packages(getattr(module, "__path__", []), package + "."):
    try:
      docs = ModuleAnalyzer.for_module(info.name).find_attr_docs()
    except Exception:  # pylint: disable=broad-except  (a module without source: nothing to read)
      continue
    if ("", name) in docs:
      return list(docs[("", name)])
  return []


def _constant_docstrings(app, what, name, obj, options, lines):  # pylint: disable=unused-argument
  """A constant re-exported by a package shows the ``#:`` comment of the module that defines it.

  autodoc reads doc comments from the module it documents the name in (the package), where the constant is only
  imported; without one, it would show the docstring of the constant's type (``tuple``, ``dict``), which is
  dropped instead.
  """
  del app, options
  if what not in ("data", "attribute"):
    return
  type_doc = type(obj).__doc__
  type_doc = type_doc.strip().splitlines() if isinstance(type_doc, str) else []
  if lines and type_doc and lines[0].strip() == type_doc[0].strip():
    lines[:] = []
  if not lines and name.startswith("ultr_jax.") and name.count(".") == 2:
    lines[:] = _attribute_doc(name.rsplit(".", 1)[0], name.rsplit(".", 1)[1])


def _click_model_parameters(app, what, name, obj, options, lines):  # pylint: disable=unused-argument
  """A registered click model's page ends with the table of its fitted parameters, generated from the model's
  ``parameters`` declaration (``click_models.base.parameter_table``): the one place they are stated."""
  del app, name, options
  from ultr_jax.simulation.click_models import base  # pylint: disable=import-outside-toplevel

  if what != "class" or not isinstance(obj, type) or not issubclass(obj, base.ClickModel) or not obj.name:
    return
  if obj.name not in base.click_models() or not obj.fittable:
    return
  lines += ["", ".. rubric:: Fitted parameters", ""] + base.parameter_table((obj.name,)) + [""]


class _ClickModelParameters(SphinxDirective):
  """``.. click-model-parameters::``: the fitted parameters of every registered fittable click model, as a
  table generated from the models' own ``parameters`` declarations."""

  def run(self):
    from ultr_jax.simulation.click_models import base  # pylint: disable=import-outside-toplevel

    container = docutils.nodes.container()
    self.state.nested_parse(docutils.statemachine.StringList(base.parameter_table()), self.content_offset, container)
    return container.children


def _public_name(app, env, node, contnode):  # pylint: disable=unused-argument
  """Points a reference to a library's class at the name its library documents it under (:data:`_PUBLIC_NAMES`).

  Runs before intersphinx resolves the reference, and resolves nothing itself.
  """
  del app, env, contnode
  parts = node.get("reftarget", "").split(".")
  public = _PUBLIC_NAMES.get((parts[0], parts[-1]))
  if node.get("refdomain") == "py" and public:
    node["reftarget"] = public


def setup(app):
  app.connect("missing-reference", _public_name, priority=400)  # before intersphinx (500)
  app.connect("autodoc-process-docstring", _constant_docstrings)
  app.connect("autodoc-process-docstring", _click_model_parameters)
  app.add_directive("click-model-parameters", _ClickModelParameters)


# Math is rendered by KaTeX, which sphinxcontrib-katex bundles: at build time where node is on the PATH (the
# built pages then hold the rendered math and load no script for it), else in the reader's browser from the copy
# of KaTeX the build puts in _static. Either way KaTeX writes MathML, which browsers draw with their own fonts, so
# the site needs no stylesheet or font from a CDN and reads offline.
katex_prerender = shutil.which("node") is not None
katex_options = "output: 'mathml'"
katex_css_path = "katex-offline.css"  # our own, in _static: the CDN's stylesheet is for KaTeX's HTML output only
if katex_prerender:
  import sphinxcontrib.katex as _katex  # pylint: disable=g-import-not-at-top

  # Prerendering passes only the extension's module-level defaults to KaTeX, not katex_options.
  _katex.KATEX_DEFAULT_OPTIONS = {**_katex.KATEX_DEFAULT_OPTIONS, "output": "mathml"}

html_theme = "furo"
html_title = f"ultr_jax {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_theme_options = {
  "source_repository": "https://github.com/ultr-jax/ultr_jax/",
  "source_branch": "main",
  "source_directory": "docs/",
}
