"""The documentation site: every public name has an API entry, no internal link or image is broken, and names of
jax, flax, optax and rax link to those libraries' sites through the committed inventories (read offline).

The checks of the built site read ``$ULTR_JAX_DOCS_HTML`` (a directory built by
``sphinx-build -b html docs <dir>``); ``.ci/run`` builds the docs after the tests and then runs this file with
it set. Without it they skip (building the site takes about a minute of CPU).
"""

import glob
import html.parser
import importlib
import os
import posixpath
import re
import urllib.parse

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The public packages whose ``__all__`` the API reference documents (docs/conf.py's API_PACKAGES).
PUBLIC_PACKAGES = (
  "data",
  "simulation",
  "metrics",
  "graph",
  "evaluation",
  "losses",
  "models",
  "train",
  "studies",
  "types",
)


def _conf_api_packages():
  with open(os.path.join(ROOT, "docs", "conf.py"), encoding="utf-8") as f:
    match = re.search(r"^API_PACKAGES = \((.*?)\)$", f.read(), re.M)
  return tuple(re.findall(r'"(\w+)"', match.group(1)))


def test_conf_generates_the_api_of_every_public_package():
  assert set(PUBLIC_PACKAGES) <= set(_conf_api_packages())


def unreadable_modules(package: str = "ultr_jax") -> list:
  """The modules of ``package`` that Sphinx's source analyzer cannot parse, each with its error.

  The analyzer gives a module its highlighted source page (``viewcode``) and its constants their ``#:`` doc
  comments; it fails on some valid Python (a ``{**mapping}`` inside a decorator's arguments), and the module's
  pages then lack both without a warning.
  """
  import pkgutil  # pylint: disable=import-outside-toplevel

  from sphinx.pycode import ModuleAnalyzer  # pylint: disable=import-outside-toplevel

  module = importlib.import_module(package)
  names = [package] + [info.name for info in pkgutil.walk_packages(getattr(module, "__path__", []), package + ".")]
  unreadable = []
  for name in names:
    try:
      analyzer = ModuleAnalyzer.for_module(name)
      analyzer.find_attr_docs()
      analyzer.find_tags()
    except Exception as e:  # pylint: disable=broad-except  (any failure is one to report)
      unreadable.append(f"{name}: {e}")
  return unreadable


def test_sphinx_reads_the_source_of_every_module(tmp_path, monkeypatch):
  pytest.importorskip("sphinx")
  assert unreadable_modules() == []
  # The check can fail: a decorator given {**defaults, ...} is reported.
  (tmp_path / "doc_probe_unreadable.py").write_text(
    'def register(**kw):\n  return lambda f: f\n\n\n@register(defaults={**{}, "a": 1})\ndef f():\n  pass\n'
  )
  monkeypatch.syspath_prepend(str(tmp_path))
  assert [m.split(":")[0] for m in unreadable_modules("doc_probe_unreadable")] == ["doc_probe_unreadable"]


def _make_inventories():
  import importlib.util  # pylint: disable=import-outside-toplevel

  path = os.path.join(ROOT, "docs", "_inventories", "make_inventories.py")
  spec = importlib.util.spec_from_file_location("make_inventories", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_committed_inventories_are_what_the_script_writes():
  inventories = _make_inventories()
  for name, (project, _, entries) in inventories.INVENTORIES.items():
    with open(inventories.inventory_path(name), "rb") as f:
      assert f.read() == inventories.inventory_bytes(project, entries), (
        f"run docs/_inventories/make_inventories.py ({name})"
      )


def test_conf_reads_every_inventory_from_a_local_file():
  with open(os.path.join(ROOT, "docs", "conf.py"), encoding="utf-8") as f:
    conf = f.read()
  assert "make_inventories.inventory_path(name)" in conf and "intersphinx_mapping" in conf
  inventories = _make_inventories()
  for name, (_, base_url, entries) in inventories.INVENTORIES.items():
    assert base_url.startswith("https://") and base_url.endswith("/"), name
    assert os.path.exists(inventories.inventory_path(name)), name
    for entry, _, uri_of in entries:
      assert not uri_of(entry).startswith(("/", "http")), entry  # relative to the site's base URL


@pytest.fixture(scope="module")
def html_dir():
  path = os.environ.get("ULTR_JAX_DOCS_HTML")
  if not path:
    pytest.skip("set ULTR_JAX_DOCS_HTML to a built site (sphinx-build -b html docs docs/_build/html; .ci/run does)")
  assert os.path.exists(os.path.join(path, "index.html")), f"no built site in {path}"
  return path


def _inventory(html_dir):
  from sphinx.util.inventory import InventoryFile  # pylint: disable=import-outside-toplevel

  with open(os.path.join(html_dir, "objects.inv"), "rb") as f:
    return InventoryFile.load(f, "", posixpath.join)


def missing_api_entries(inventory) -> list:
  """The ``ultr_jax.<package>.<name>`` of every public ``__all__`` name without a page in the inventory."""
  documented = {}
  for role, items in inventory.items():
    if role.startswith("py:"):
      for name, item in items.items():
        documented[name] = item[2] if isinstance(item, tuple) else item.uri
  missing = []
  for package in PUBLIC_PACKAGES:
    module = importlib.import_module(f"ultr_jax.{package}")
    for name in module.__all__:
      full = f"ultr_jax.{package}.{name}"
      if full not in documented or "api/generated/" not in documented[full]:
        missing.append(full)
  return missing


def test_every_public_name_has_an_api_entry(html_dir):
  inventory = _inventory(html_dir)
  assert missing_api_entries(inventory) == []
  # The check can fail: an inventory without one entry reports that name.
  dropped = {role: dict(items) for role, items in inventory.items()}
  dropped["py:function"].pop("ultr_jax.losses.ips_softmax_loss")
  assert missing_api_entries(dropped) == ["ultr_jax.losses.ips_softmax_loss"]


class _Links(html.parser.HTMLParser):
  """Collects the href/src targets and the element ids of one HTML page."""

  def __init__(self):
    super().__init__()
    self.targets, self.ids = [], set()

  def handle_starttag(self, tag, attrs):
    attrs = dict(attrs)
    if attrs.get("id"):
      self.ids.add(attrs["id"])
    if tag == "a" and attrs.get("name"):
      self.ids.add(attrs["name"])
    for key in ("href", "src"):
      if attrs.get(key) and tag in ("a", "img", "link", "script", "source"):
        self.targets.append(attrs[key])


def broken_links(html_dir) -> list:
  """Every internal link or image target (file, and #fragment where one is given) that does not exist."""
  pages = {}
  for path in glob.glob(os.path.join(html_dir, "**", "*.html"), recursive=True):
    parser = _Links()
    with open(path, encoding="utf-8") as f:
      parser.feed(f.read())
    pages[os.path.normpath(path)] = parser
  broken = []
  for path, parser in sorted(pages.items()):
    for target in parser.targets:
      parts = urllib.parse.urlsplit(target)
      if parts.scheme or parts.netloc or target.startswith(("mailto:", "javascript:")):
        continue  # external
      file = (
        os.path.normpath(os.path.join(os.path.dirname(path), urllib.parse.unquote(parts.path))) if parts.path else path
      )
      if not os.path.exists(file):
        broken.append(f"{os.path.relpath(path, html_dir)} -> {target}")
      elif parts.fragment and file in pages and parts.fragment not in pages[file].ids and parts.fragment != "top":
        broken.append(f"{os.path.relpath(path, html_dir)} -> {target} (no such anchor)")
  return broken


def test_internal_links_and_images_exist(html_dir, tmp_path):
  assert broken_links(html_dir) == []
  # The check can fail: a page linking a missing file and a missing anchor reports both.
  (tmp_path / "index.html").write_text('<a href="gone.html">x</a><img src="_static/x.png"><a href="#nowhere">y</a>')
  assert len(broken_links(str(tmp_path))) == 3


def offline_math_problems(page_html: str) -> list:
  """What keeps a page's math from reading offline: TeX left for a script to render, or a script from elsewhere.

  The math is rendered when the site is built (``docs/conf.py``: KaTeX writes MathML), so a page holds ``<math>``
  elements; TeX survives only inside their ``<annotation>``. Outside it, a ``\\(`` or ``\\[`` delimiter is math
  that a browser script would have to find, and a ``<script src="http...">`` is a download.
  """
  visible = re.sub(r"<annotation\b.*?</annotation>", "", page_html, flags=re.S)
  problems = [f"unrendered {d}" for d in ("\\(", "\\[", "$$") if d in visible]
  problems += [f"remote script {src}" for src in re.findall(r'<script[^>]*\bsrc="(https?://[^"]+)"', page_html)]
  if "<math" not in page_html:
    problems.append("no rendered math")
  return problems


def test_math_is_rendered_when_the_site_is_built(html_dir):
  page = os.path.join(html_dir, "api", "generated", "ultr_jax.losses.ips_softmax_loss.html")
  with open(page, encoding="utf-8") as f:
    assert offline_math_problems(f.read()) == []
  # The check can fail: TeX for a browser script, and MathJax from a CDN, are both reported.
  left_for_a_script = '<span class="math">\\(x^2\\)</span><script src="https://cdn.example/mathjax.js"></script>'
  assert offline_math_problems(left_for_a_script) == [
    "unrendered \\(",
    "remote script https://cdn.example/mathjax.js",
    "no rendered math",
  ]


def pages_without_sections(html_dir) -> list:
  """Every public function whose API page lacks a parameter list (when it takes arguments) or a return (or yield)
  section (unless it returns None), as the site rendered them."""
  import inspect  # pylint: disable=import-outside-toplevel

  missing = []
  for package in PUBLIC_PACKAGES:
    module = importlib.import_module(f"ultr_jax.{package}")
    for name in module.__all__:
      fn = inspect.unwrap(getattr(module, name))
      if not inspect.isfunction(fn):
        continue
      with open(os.path.join(html_dir, "api", "generated", f"ultr_jax.{package}.{name}.html"), encoding="utf-8") as f:
        page = f.read()
      signature = inspect.signature(fn)
      skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
      if any(p.kind not in skip for p in signature.parameters.values()) and ">Parameters<" not in page:
        missing.append(f"{package}.{name}: no parameter list")
      if signature.return_annotation not in (None, "None") and ">Returns<" not in page and ">Yields<" not in page:
        missing.append(f"{package}.{name}: no return section")
  return missing


def test_every_function_page_lists_its_parameters_and_what_it_returns(html_dir, tmp_path):
  assert pages_without_sections(html_dir) == []
  # The check can fail: a page of ips_softmax_loss without its sections is reported.
  generated = tmp_path / "api" / "generated"
  generated.mkdir(parents=True)
  for package in PUBLIC_PACKAGES:
    for name in importlib.import_module(f"ultr_jax.{package}").__all__:
      (generated / f"ultr_jax.{package}.{name}.html").write_text("<dt>Parameters</dt><dt>Returns</dt>")
  (generated / "ultr_jax.losses.ips_softmax_loss.html").write_text("<p>A loss.</p>")
  assert pages_without_sections(str(tmp_path)) == [
    "losses.ips_softmax_loss: no parameter list",
    "losses.ips_softmax_loss: no return section",
  ]


def external_links(page_html: str) -> dict:
  """``{href: title}`` of the links a page makes to other sites (intersphinx titles one ``(in <Project>)``)."""
  return dict(re.findall(r'<a class="reference external" href="([^"]+)" title="([^"]+)"', page_html))


@pytest.mark.parametrize(
  "page, url, project",
  [
    ("ultr_jax.losses.ips_softmax_loss", "https://docs.jax.dev/en/latest/_autosummary/jax.Array.html#jax.Array", "JAX"),
    (
      "ultr_jax.train.make_optimizer",
      "https://optax.readthedocs.io/en/latest/api/transformations.html#optax.GradientTransformation",
      "Optax",
    ),
    (
      "ultr_jax.models.MLPRanker",
      "https://flax-linen.readthedocs.io/en/latest/api_reference/flax.linen/module.html#flax.linen.Module",
      "Flax",
    ),
    ("ultr_jax.metrics.ndcg", "https://rax.readthedocs.io/en/latest/api.html#rax.ndcg_metric", "Rax"),
  ],
)
def test_library_names_link_to_their_own_sites(html_dir, page, url, project):
  with open(os.path.join(html_dir, "api", "generated", f"{page}.html"), encoding="utf-8") as f:
    links = external_links(f.read())
  assert links.get(url) == f"(in {project})", sorted(links)


def attribute_type_fields(html_dir) -> list:
  """``page: text`` of every "Type" field on an API page.

  Napoleon reads the first line of an attribute's or property's doc as ``type: description`` when it holds a
  colon, so "The number of pairs: ..." renders with the type "The number of pairs"; this site's attributes take
  their types from annotations, never from such a field.
  """
  found = []
  for path in sorted(glob.glob(os.path.join(html_dir, "api", "generated", "*.html"))):
    with open(path, encoding="utf-8") as f:
      page = f.read()
    for text in re.findall(r'>Type<span class="colon">:</span></dt>\s*<dd[^>]*>(.*?)</dd>', page, re.S):
      found.append(f"{os.path.basename(path)}: {re.sub(r'<[^>]+>', '', text).strip()}")
  return found


def test_no_attribute_doc_is_read_as_a_type(html_dir, tmp_path):
  assert attribute_type_fields(html_dir) == []
  # The check can fail: an attribute whose doc napoleon split at its colon is reported.
  generated = tmp_path / "api" / "generated"
  generated.mkdir(parents=True)
  (generated / "x.html").write_text(
    '<dt class="field-odd">Type<span class="colon">:</span></dt>\n<dd><p>Pairs</p></dd>'
  )
  assert attribute_type_fields(str(tmp_path)) == ["x.html: Pairs"]


def study_page_figure_problems(html_dir) -> list:
  """Study pages that show no figure of their own study (an image from ``docs/_static/figures/<study>/``, where the
  default runs' figures are committed) and do not say why (``No figure is committed``), or show the smoke run's
  figures (captioned ``(smoke config)``) without saying why the default run's are not drawn."""
  problems = []
  for page in sorted(glob.glob(os.path.join(html_dir, "studies", "*.html"))):
    study = os.path.splitext(os.path.basename(page))[0]
    if study == "index":
      continue
    with open(page, encoding="utf-8") as f:
      text = f.read()
    figures = os.path.join(ROOT, "docs", "_static", "figures", study)  # sphinx copies them to _images/
    drawn = set(os.listdir(figures)) if os.path.isdir(figures) else set()
    own = [src for src in re.findall(r'<img[^>]*\bsrc="([^"]+)"', text) if posixpath.basename(src) in drawn]
    if not own and "No figure is committed" not in text:
      problems.append(f"studies/{study}.html: no figure of its default run and no reason why")
    if own and "(smoke config)" in text and "figures are not drawn" not in text:
      problems.append(f"studies/{study}.html: figures of the smoke run, not the default run, and no reason why")
  return problems


def test_every_study_page_shows_its_default_run_figures_or_says_why_not(html_dir, tmp_path):
  assert study_page_figure_problems(html_dir) == []
  (tmp_path / "studies").mkdir()  # the check can fail: a page with another study's figure only
  (tmp_path / "studies" / "x.html").write_text('<img src="../_images/fig2_leakage_ess.png">')
  assert study_page_figure_problems(str(tmp_path)) == ["studies/x.html: no figure of its default run and no reason why"]
  (tmp_path / "studies" / "x.html").unlink()
  (tmp_path / "studies" / "online.html").write_text('<img src="../_images/fig_online.png"> (smoke config)')
  assert study_page_figure_problems(str(tmp_path)) == [
    "studies/online.html: figures of the smoke run, not the default run, and no reason why"
  ]
