r"""Loader for the ULTRA data format (Ai et al., 2018/2021; ULTRA framework).

A split directory holds, for a split ``S`` (``train``, ``valid``, ``test``)::

    DIR/settings.json            {"feature_size": F, "rank_cutoff": L, ...}
    DIR/S/S.feature              one line per document: "doc_id idx:val ..."
    DIR/S/S.init_list            one line per query: "qid doc_id doc_id ..."
    DIR/S/S.labels               one line per query: "qid label label ..."

Item ``i`` of an ``init_list`` line is the document displayed at position
``i``. Document ids index the ``.feature`` file; a document keeps one label
everywhere it is shown. This is the format of the Identifiability paper's
fully synthetic data (Chen et al., ICML 2024, Section 5.1).
"""

import difflib
import math
import pathlib
import warnings
from typing import Optional, Union

import numpy as np

from ultr_jax.data import _io
from ultr_jax.data.dataset import RankingDataset

__all__ = ["load_ultra", "read_ultra_features"]

_F32_MAX = float(np.finfo(np.float32).max)
_REPEATED = ("warn", "error", "allow")


def _err(path, line_no, field, msg):
  return ValueError(f"{path}:{line_no}: field {field!r}: {msg}")


def _show(tok: bytes) -> str:
  return repr(tok.decode("utf-8", "backslashreplace"))


def _lines(path) -> list:
  """``(line_no, tokens)`` of the file's non-blank lines; tokens are bytes split at ASCII whitespace.

  The file must be UTF-8 (gzip is decompressed); otherwise a ValueError names the file and line.
  """
  data = _io.read_bytes(path)
  _io.decode_utf8(data, path)
  return [(line_no, toks) for line_no, raw in enumerate(data.split(b"\n"), 1) if (toks := raw.split())]


def _number(tok: bytes, path, line_no, field) -> float:
  """A decimal number that fits float32, else ValueError naming the line and field."""
  if not _io.NUM_RE.fullmatch(tok):
    why = "non-finite" if tok.lstrip(b"+-").lower() in _io.NONFINITE else "non-numeric"
    raise _err(path, line_no, field, f"{why} value {_show(tok)} (expected a decimal number)")
  v = float(tok)
  if abs(v) > _F32_MAX:
    raise _err(path, line_no, field, f"{_show(tok)} is outside the float32 range")
  return v


def read_ultra_features(path, *, feature_size: Optional[int] = None, dense: bool = True):
  r"""Reads an ULTRA ``.feature`` file.

  Each line is ``doc_id idx:val idx:val ...`` (0-based feature indices, each
  at most once per line; values decimal numbers that fit float32).

  Args:
    path: the ``.feature`` file (UTF-8; gzip is decompressed).
    feature_size: number of features ``F`` (default: max index + 1, which
      may be at most ``max(65536, number of values in the file)``).
    dense: return a dense ``float32[D, F]`` matrix; otherwise ``None`` in its
      place (the lines are still checked).

  Returns:
    ``(doc_names list[str], features float32[D, F] or None)``, in file order.

  Raises:
    ValueError: naming the file, line and field, for a byte that is not
      UTF-8, a token that is not ``idx:val``, a non-integer or negative
      index, an index given twice on a line or at least ``feature_size``, a
      value that is not a finite decimal number in the float32 range, or a
      document id given twice.

  >>> import tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.feature"
  >>> _ = p.write_text("a 0:1 2:0.5\nb 1:2\n")
  >>> names, f = read_ultra_features(p)
  >>> print(names, f.sum())
  ['a', 'b'] 3.5
  """
  names, lines, cols, vals, rows = [], [], [], [], []
  for line_no, toks in _lines(path):
    names.append(toks[0].decode("utf-8"))
    lines.append(line_no)
    seen = set()
    for tok in toks[1:]:
      k, sep, v = tok.partition(b":")
      if not sep:
        raise _err(path, line_no, "feature", f"bad token {_show(tok)} (expected idx:val)")
      if not _io.INT_RE.fullmatch(k) or int(k) < 0:
        raise _err(path, line_no, "feature", f"bad index in {_show(tok)} (expected an integer >= 0)")
      k = int(k)
      if k in seen:
        raise _err(path, line_no, "feature", f"index {k} appears more than once on the line")
      seen.add(k)
      cols.append(k)
      vals.append(_number(v, path, line_no, "feature"))
      rows.append(len(names) - 1)
  if len(set(names)) != len(names):
    first = {}
    for n, line_no in zip(names, lines):
      if n in first:
        raise _err(path, line_no, "doc_id", f"duplicate document id {n!r} (first at line {first[n]})")
      first[n] = line_no
  cols = np.asarray(cols, np.int64)
  if feature_size is None:
    limit = _io.extent_limit(len(cols))
    if len(cols) and cols.max() >= limit:
      j = int(np.flatnonzero(cols >= limit)[0])
      raise _err(
        path,
        lines[rows[j]],
        "feature",
        f"index {cols[j]} is absurdly large for a file of {len(cols)} values (at least {limit}); "
        "give feature_size to allow it",
      )
    width = int(cols.max()) + 1 if len(cols) else 0
  else:
    width = int(feature_size)
    bad = np.flatnonzero(cols >= width)
    if len(bad):
      j = int(bad[0])
      raise _err(path, lines[rows[j]], "feature", f"index {cols[j]} outside [0, {width}) (feature_size)")
  if not dense:
    return names, None
  out = np.zeros((len(names), width), np.float32)
  out[np.asarray(rows, np.int64), cols] = np.asarray(vals, np.float64)
  return names, out


def _settings(root: pathlib.Path) -> dict:
  """``settings.json``, checked: ``feature_size`` an integer >= 1, ``rank_cutoff`` >= 1, ``max_label`` >= 0."""
  path = root / "settings.json"
  if not path.is_file():
    raise ValueError(
      f"{path}: missing; an ULTRA directory holds settings.json with the feature_size (and rank_cutoff) "
      "that all its splits share"
    )
  settings = _io.read_json(path)
  if not isinstance(settings, dict):
    raise ValueError(f"{path}: expected a JSON object, got {type(settings).__name__}")

  def integer(key, low, required):
    if key not in settings and required:
      near = difflib.get_close_matches(key, list(settings), n=1)
      hint = f" (the file has {near[0]!r})" if near else ""
      raise ValueError(f"{path}: field {key!r}: missing; expected an integer >= {low}{hint}")
    v = settings.get(key)
    if v is None and not required:
      return None
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
      raise ValueError(f"{path}: field {key!r}: expected an integer >= {low}, got {v!r}")
    return v

  out: dict[str, Union[int, float, None]] = {
    "feature_size": integer("feature_size", 1, True),
    "rank_cutoff": integer("rank_cutoff", 1, False),
  }
  m = settings.get("max_label")
  if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m < math.inf):
    raise ValueError(f"{path}: field 'max_label': expected a finite number >= 0, got {m!r}")
  out["max_label"] = m
  return out


def load_ultra(
  directory,
  split: str = "train",
  *,
  with_features: bool = False,
  list_size: Optional[int] = None,
  repeated_docs: str = "warn",
) -> RankingDataset:
  r"""Loads one split of an ULTRA-format directory as a :class:`RankingDataset`.

  ``doc_ids[q, i]`` is the row of the displayed document in ``S.feature``
  (its one-hot index in the synthetic data), ``-1`` at padding; ``labels``
  come from ``S.labels``; ``where`` marks real items. Position ``i`` of a
  list is item ``i``.

  Args:
    directory: the dataset root holding ``settings.json`` and ``S/``.
    split: ``train``, ``valid`` or ``test``.
    with_features: also build dense ``features [Q, L, F]`` (otherwise the
      feature axis is empty, ``F = 0``: the one-hot synthetic data would take
      460 MB dense).
    list_size: pad to this size (default: ``rank_cutoff`` of the settings,
      or the longest list).
    repeated_docs: a list that shows one document twice: ``"warn"`` (kept,
      with a warning naming the file and the first such line; the
      Identifiability paper's own synthetic data has a few), ``"error"`` (a
      ValueError naming the file, line and field) or ``"allow"`` (kept
      silently).

  Returns:
    The split's :class:`RankingDataset`.

  Raises:
    ValueError: naming the file, line and field, for a missing or malformed
      ``settings.json`` (it must be a JSON object with an integer
      ``feature_size``; ``rank_cutoff`` and ``max_label`` are optional), a
      file that is not UTF-8, an unknown document, a document shown twice in
      one list, a list longer than ``rank_cutoff``, ``init_list`` and
      ``labels`` lines of different lengths or query ids, a label that is not
      a finite number in ``[0, max_label]`` (``max_label`` of the settings,
      else no upper bound), one document with two labels, or a bad
      ``.feature`` line (see :func:`read_ultra_features`).

  >>> import tempfile
  >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "train").mkdir()
  >>> _ = (d / "settings.json").write_text('{"feature_size": 3, "rank_cutoff": 3}')
  >>> w = lambda n, s: (d / "train" / ("train." + n)).write_text(s)
  >>> _ = w("feature", "0 0:1\n1 1:1\n2 2:1\n")
  >>> _ = w("init_list", "7 2 0\n8 1 2 0\n")
  >>> _ = w("labels", "7 1 0\n8 3 1 0\n")
  >>> ds = load_ultra(d)
  >>> print(ds.doc_ids.tolist(), ds.labels.sum())
  [[2, 0, -1], [1, 2, 0]] 5.0
  """
  if repeated_docs not in _REPEATED:
    raise ValueError(f"repeated_docs must be one of {_REPEATED}, got {repeated_docs!r}")
  root = pathlib.Path(directory)
  settings = _settings(root)
  feat_path, list_path, label_path = _split_files(root, split)
  names, feats = _split_features(root, settings, feat_path, with_features)
  index = {n.encode("utf-8"): i for i, n in enumerate(names)}

  lists = _lines(list_path)
  labels = _lines(label_path)
  if len(lists) != len(labels):
    raise ValueError(f"{label_path}: {len(labels)} queries, but {list_path} has {len(lists)} (field 'qid')")
  doc_label = np.full(len(names), np.nan)
  doc_label_line = np.zeros(len(names), np.int64)
  qids, rows, lab_rows, repeated = [], [], [], []
  for (ln, lp), (lb, ll) in zip(lists, labels):
    if lp[0] != ll[0]:
      raise _err(label_path, lb, "qid", f"query {_show(ll[0])} where {list_path}:{ln} has {_show(lp[0])}")
    if len(lp) != len(ll):
      raise _err(label_path, lb, "labels", f"{len(ll) - 1} labels for {len(lp) - 1} documents in {list_path}:{ln}")
    qid, ids = _list_documents(lp, list_path, ln, index, feat_path, settings["rank_cutoff"])
    msg = _repeated_document(ids, names)
    if msg is not None:
      if repeated_docs == "error":
        raise _err(list_path, ln, "doc_id", msg)
      repeated.append((ln, msg))
    labs = [_number(v, label_path, lb, "labels") for v in ll[1:]]
    _check_labels(ids, labs, names, label_path, lb, settings["max_label"], doc_label, doc_label_line)
    qids.append(qid)
    rows.append(ids)
    lab_rows.append(labs)
  if repeated and repeated_docs == "warn":
    ln, msg = repeated[0]
    warnings.warn(
      f"{list_path}:{ln}: field 'doc_id': {msg}; {len(repeated)} list(s) of {len(rows)} show a document twice "
      "(kept; repeated_docs='error' refuses them, 'allow' keeps them silently)",
      stacklevel=2,
    )
  return _padded_dataset(qids, rows, lab_rows, feats, list_size or settings["rank_cutoff"], list_path, with_features)


def _split_files(root: pathlib.Path, split: str) -> tuple:
  """The split's ``.feature``, ``.init_list`` and ``.labels`` files, each of which must exist."""
  paths = tuple(root / split / f"{split}.{kind}" for kind in ("feature", "init_list", "labels"))
  for p in paths:
    if not p.is_file():
      raise ValueError(f"{p}: missing ULTRA file")
  return paths


def _split_features(root: pathlib.Path, settings: dict, feat_path: pathlib.Path, with_features: bool) -> tuple:
  """``(names, features)`` of the split's ``.feature`` file, after checking the settings' sizes against it."""
  rank_cutoff = settings["rank_cutoff"]
  if with_features and settings["feature_size"] > _io.extent_limit(feat_path.stat().st_size):
    raise ValueError(
      f"{root / 'settings.json'}: field 'feature_size': {settings['feature_size']} is absurdly large for "
      f"{feat_path} ({feat_path.stat().st_size} bytes)"
    )
  names, feats = read_ultra_features(feat_path, feature_size=settings["feature_size"], dense=with_features)
  if rank_cutoff is not None and rank_cutoff > _io.extent_limit(len(names)):
    raise ValueError(
      f"{root / 'settings.json'}: field 'rank_cutoff': {rank_cutoff} is absurdly large for {len(names)} documents"
    )
  return names, feats


def _list_documents(lp: list, list_path, ln: int, index: dict, feat_path, rank_cutoff: Optional[int]) -> tuple:
  """``(qid, rows)`` of one ``.init_list`` line: its query id and the ``.feature`` row of each document."""
  if rank_cutoff is not None and len(lp) - 1 > rank_cutoff:
    raise _err(
      list_path,
      ln,
      "doc_id",
      f"{len(lp) - 1} documents: position {len(lp) - 2} is beyond rank_cutoff={rank_cutoff} of settings.json",
    )
  if not _io.INT_RE.fullmatch(lp[0]) or abs(int(lp[0])) >= 2**63:
    raise _err(list_path, ln, "qid", f"not a 64-bit integer: {_show(lp[0])}")
  ids = []
  for name in lp[1:]:
    i = index.get(name)
    if i is None:
      raise _err(list_path, ln, "doc_id", f"document {_show(name)} is not in {feat_path}")
    ids.append(i)
  return int(lp[0]), ids


def _repeated_document(ids: list, names: list) -> Optional[str]:
  """The message naming the first document a list shows twice, or None when it shows each once."""
  if len(set(ids)) == len(ids):
    return None
  j = next(j for j in range(len(ids)) if ids[j] in ids[:j])
  return f"document {names[ids[j]]!r} is shown twice in one list (positions {ids.index(ids[j])} and {j})"


def _check_labels(ids, labs, names, label_path, lb, max_label, doc_label, doc_label_line) -> None:
  """Checks one ``.labels`` line: each label in ``[0, max_label]``, and each document's label the one it had before.

  ``doc_label`` (NaN: not seen yet) and ``doc_label_line`` record each document's first label and its line.
  """
  for i, y in zip(ids, labs):
    if y < 0 or (max_label is not None and y > max_label):
      raise _err(
        label_path,
        lb,
        "labels",
        f"label {y:g} of document {names[i]!r} is outside [0, {'inf' if max_label is None else max_label}]"
        + (" (max_label of settings.json)" if max_label is not None else ""),
      )
    if np.isnan(doc_label[i]):
      doc_label[i], doc_label_line[i] = y, lb
    elif doc_label[i] != y:
      raise _err(
        label_path,
        lb,
        "labels",
        f"document {names[i]!r} has label {y:g} here but {doc_label[i]:g} at line {doc_label_line[i]}",
      )


def _padded_dataset(qids, rows, lab_rows, feats, list_size, list_path, with_features: bool) -> RankingDataset:
  """The :class:`RankingDataset` of the parsed lists, padded to ``list_size`` (None: the longest list)."""
  longest = max((len(r) for r in rows), default=0)
  size = list_size or longest
  if longest > size:
    raise ValueError(f"{list_path}: a list of {longest} > list_size={size}")
  q = len(rows)
  doc_ids = np.full((q, size), -1, np.int32)
  lab = np.zeros((q, size), np.float32)
  for j, (ids, labs) in enumerate(zip(rows, lab_rows)):
    doc_ids[j, : len(ids)] = ids
    lab[j, : len(labs)] = labs
  where = doc_ids >= 0
  if with_features:
    features = np.where(where[..., None], feats[np.maximum(doc_ids, 0)], 0.0)
    features = features.astype(np.float32)
  else:
    features = np.zeros((q, size, 0), np.float32)
  return RankingDataset(
    features=features,
    labels=lab,
    where=where,
    qid=np.asarray(qids, np.int64),
    doc_ids=doc_ids,
    extras={"positions": np.broadcast_to(np.arange(size, dtype=np.int32), (q, size)).copy()},
  )
