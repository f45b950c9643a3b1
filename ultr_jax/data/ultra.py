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

import json
import pathlib
from typing import Optional

import numpy as np

from ultr_jax.data.dataset import RankingDataset

__all__ = ["load_ultra", "read_ultra_features"]


def _err(path, line_no, field, msg):
  return ValueError(f"{path}:{line_no}: field {field!r}: {msg}")


def read_ultra_features(path, *, feature_size: Optional[int] = None, dense: bool = True):
  r"""Reads an ULTRA ``.feature`` file.

  Each line is ``doc_id idx:val idx:val ...`` (0-based feature indices).

  Args:
    path: the ``.feature`` file.
    feature_size: number of features ``F`` (default: max index + 1).
    dense: return a dense ``float32[D, F]`` matrix; otherwise ``None`` in its
      place (only ids are parsed).

  Returns:
    ``(doc_names list[str], features float32[D, F] or None)``, in file order.

  >>> import tempfile, os
  >>> d = tempfile.mkdtemp(); p = os.path.join(d, "x.feature")
  >>> _ = open(p, "w").write("a 0:1 2:0.5\nb 1:2\n")
  >>> names, f = read_ultra_features(p)
  >>> print(names, f.sum())
  ['a', 'b'] 3.5
  """
  names, rows = [], []
  with open(path) as fh:
    for line_no, line in enumerate(fh, 1):
      parts = line.split()
      if not parts:
        continue
      names.append(parts[0])
      if dense:
        pairs = []
        for tok in parts[1:]:
          k, sep, v = tok.partition(":")
          try:
            if not sep:
              raise ValueError
            pairs.append((int(k), float(v)))
          except ValueError:
            raise _err(path, line_no, "feature", f"bad token {tok!r}") from None
        rows.append(pairs)
  if len(set(names)) != len(names):
    seen = set()
    for i, n in enumerate(names):
      if n in seen:
        raise _err(path, i + 1, "doc_id", f"duplicate document id {n!r}")
      seen.add(n)
  if not dense:
    return names, None
  width = feature_size if feature_size is not None else 1 + max((k for r in rows for k, _ in r), default=-1)
  out = np.zeros((len(rows), width), np.float32)
  for i, pairs in enumerate(rows):
    for k, v in pairs:
      if not 0 <= k < width:
        raise _err(path, i + 1, "feature", f"index {k} outside [0, {width}) (feature_size)")
      out[i, k] = v
  return names, out


def load_ultra(
  directory, split: str = "train", *, with_features: bool = False, list_size: Optional[int] = None
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

  Raises:
    ValueError: naming the file, line and field, for an unknown document, a
      list longer than ``rank_cutoff``, ``init_list`` and ``labels`` lines of
      different lengths or query ids, or one document with two labels.

  >>> import tempfile, os
  >>> d = tempfile.mkdtemp(); os.mkdir(os.path.join(d, "train"))
  >>> _ = open(os.path.join(d, "settings.json"), "w").write(
  ...     '{"feature_size": 3, "rank_cutoff": 3}')
  >>> w = lambda n, s: open(os.path.join(d, "train", "train." + n), "w").write(s)
  >>> _ = w("feature", "0 0:1\n1 1:1\n2 2:1\n")
  >>> _ = w("init_list", "7 2 0\n8 1 2 0\n")
  >>> _ = w("labels", "7 1 0\n8 3 1 0\n")
  >>> ds = load_ultra(d)
  >>> print(ds.doc_ids.tolist(), ds.labels.sum())
  [[2, 0, -1], [1, 2, 0]] 5.0
  """
  root = pathlib.Path(directory)
  settings = {}
  if (root / "settings.json").is_file():
    with open(root / "settings.json") as fh:
      settings = json.load(fh)
  rank_cutoff = settings.get("rank_cutoff")
  sdir = root / split
  feat_path = sdir / f"{split}.feature"
  list_path = sdir / f"{split}.init_list"
  label_path = sdir / f"{split}.labels"
  for p in (feat_path, list_path, label_path):
    if not p.is_file():
      raise ValueError(f"{p}: missing ULTRA file")
  names, feats = read_ultra_features(feat_path, feature_size=settings.get("feature_size"), dense=with_features)
  index = {n: i for i, n in enumerate(names)}

  def read_lines(path):
    out = []
    with open(path) as fh:
      for line_no, line in enumerate(fh, 1):
        parts = line.split()
        if parts:
          out.append((line_no, parts))
    return out

  lists = read_lines(list_path)
  labels = read_lines(label_path)
  if len(lists) != len(labels):
    raise ValueError(f"{label_path}: {len(labels)} queries, but {list_path} has {len(lists)} (field 'qid')")
  doc_label = np.full(len(names), -1.0)
  doc_label_line = np.zeros(len(names), np.int64)
  qids, rows, lab_rows = [], [], []
  for (ln, lp), (lb, ll) in zip(lists, labels):
    if lp[0] != ll[0]:
      raise _err(label_path, lb, "qid", f"query {ll[0]!r} where {list_path}:{ln} has {lp[0]!r}")
    if len(lp) != len(ll):
      raise _err(label_path, lb, "labels", f"{len(ll) - 1} labels for {len(lp) - 1} documents in {list_path}:{ln}")
    if rank_cutoff is not None and len(lp) - 1 > rank_cutoff:
      raise _err(
        list_path,
        ln,
        "doc_id",
        f"{len(lp) - 1} documents: position {len(lp) - 2} is beyond rank_cutoff={rank_cutoff} of settings.json",
      )
    try:
      qid = int(lp[0])
    except ValueError:
      raise _err(list_path, ln, "qid", f"not an integer: {lp[0]!r}") from None
    ids = []
    for name in lp[1:]:
      if name not in index:
        raise _err(list_path, ln, "doc_id", f"document {name!r} is not in {feat_path}")
      ids.append(index[name])
    try:
      labs = [float(v) for v in ll[1:]]
    except ValueError:
      raise _err(label_path, lb, "labels", "non-numeric label") from None
    for i, y in zip(ids, labs):
      if doc_label[i] < 0:
        doc_label[i], doc_label_line[i] = y, lb
      elif doc_label[i] != y:
        raise _err(
          label_path,
          lb,
          "labels",
          f"document {names[i]!r} has label {y:g} here but {doc_label[i]:g} at line {doc_label_line[i]}",
        )
    qids.append(qid)
    rows.append(ids)
    lab_rows.append(labs)
  longest = max((len(r) for r in rows), default=0)
  size = list_size or rank_cutoff or longest
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
