"""Sphinx configuration for ultr_jax's documentation.

Build: ``pip install -e ".[docs]" && sphinx-build -W --keep-going -b html docs docs/_build/html``.

At configuration time this file writes ``docs/api/<package>.rst`` with one ``autosummary`` list per public
package, generated from the package's ``__all__`` (so a name added later is documented without editing the
docs), and copies the Colab notebooks from ``colab/`` into ``docs/notebooks/`` (rendered with their stored
outputs, never executed). Both are build outputs and ignored by git.
"""

import importlib
import os
import shutil
import sys

_DOCS = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_DOCS)
sys.path.insert(0, _ROOT)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# The packages whose ``__all__`` makes the API reference (tests/test_docs.py checks every name has an entry).
API_PACKAGES = ("data", "simulation", "metrics", "graph", "evaluation", "losses", "models", "train", "studies")
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


def _write_api_pages():
  """One page per package: its docstring, then an autosummary table of its ``__all__`` (sorted)."""
  os.makedirs(_API_DIR, exist_ok=True)
  for package in API_PACKAGES:
    module = importlib.import_module(f"ultr_jax.{package}")
    title = f"ultr_jax.{package}"
    lines = [
      title,
      "=" * len(title),
      "",
      f".. automodule:: ultr_jax.{package}",
      "   :no-members:",
      "",
      f".. currentmodule:: ultr_jax.{package}",
      "",
      ".. autosummary::",
      "   :toctree: generated",
      "",
    ]
    lines += [f"   {name}" for name in sorted(module.__all__, key=str.lower)]
    _write_if_changed(os.path.join(_API_DIR, f"{package}.rst"), "\n".join(lines) + "\n")
  index = [
    "API reference",
    "=============",
    "",
    "Every name in each public package's ``__all__``.",
    "",
    ".. toctree::",
    "   :maxdepth: 1",
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
  "sphinx.ext.napoleon",
  "sphinx.ext.viewcode",
  "sphinx.ext.mathjax",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# Notebooks render with the outputs stored in them; nothing runs at build time.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# Broken cross-references are errors (with -W), except those the site cannot resolve by design: type annotations
# (jax.Array, typing, numpy), other libraries' objects (no intersphinx: CI may be offline), and the packages'
# submodules and helper modules (the reference documents each package's __all__, not its module tree).
nitpicky = True
nitpick_ignore_regex = [
  ("py:class", r"(?!ultr_jax\.).*"),
  (r"py:\w+", r"(rax|jax|jnp|flax|nn|optax|orbax|np|numpy|scipy|ml_collections|absl|pyarrow)(\..*)?"),
  ("py:mod", r"ultr_jax\.(types|testing|\w+\.[\w.]+)"),
  ("py:class", r"ultr_jax\.[\w.]+\._\w+"),  # a private base class (shown under "Bases")
]

autosummary_generate = True
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


def _drop_type_docstrings(app, what, name, obj, options, lines):  # pylint: disable=unused-argument
  """A constant (a tuple, dict, ...) without its own doc comment would show its type's docstring; show none."""
  del app, name, options
  type_doc = type(obj).__doc__
  type_doc = type_doc.strip().splitlines() if isinstance(type_doc, str) else []
  if what in ("data", "attribute") and lines and type_doc and lines[0].strip() == type_doc[0].strip():
    lines[:] = []


def setup(app):
  app.connect("autodoc-process-docstring", _drop_type_docstrings)


# MathJax comes from Sphinx's default CDN; for reading the site offline, point ULTR_JAX_DOCS_MATHJAX at a local
# copy (e.g. Debian's libjs-mathjax: file:///usr/share/javascript/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML).
if os.environ.get("ULTR_JAX_DOCS_MATHJAX"):
  mathjax_path = os.environ["ULTR_JAX_DOCS_MATHJAX"]

html_theme = "furo"
html_title = f"ultr_jax {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_theme_options = {
  "source_repository": "https://github.com/ultr-jax/ultr_jax/",
  "source_branch": "main",
  "source_directory": "docs/",
}
