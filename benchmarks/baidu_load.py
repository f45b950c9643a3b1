"""Baidu-ULTR loading speed: ultr_jax.data.load_baidu_ultr vs a per-row Python loop, same process.

Writes a file like the hub's Baidu-ULTR click files (one row per shown
document: ``query_id``, ``position``, ``click``, a 768-d float16
``query_document_embedding`` and the 12 lexical features; ``--pages`` pages of
up to 10 documents, shuffled within each page), in the document-per-row
feather layout and the page-per-row Parquet layout, then times, as the median
of ``--repeats`` runs:

* ``ours``: :func:`ultr_jax.data.load_baidu_ultr` into padded ``[S, L, F]`` pages;
* ``row loop``: the same pages built by a Python loop over the rows (the way
  a per-query aggregation such as the hub's dataset builder walks the file),
  reading the columns as NumPy first so that only the grouping is in Python;
* ``pyarrow read alone``: reading the same columns into an Arrow table, the
  floor for any loader of that file (both files use pyarrow's default
  compression, LZ4 for feather; Parquet decodes the nested float16 lists far
  more slowly);

checks that ours and the row loop give the same arrays, and prints documents
per second and the ratios.

Then the raw session files (``part-XXXXX.gz``): ``--sessions`` pages of up to
10 documents whose lines carry title and abstract token ids as long as the
release's (about 900 bytes a document line), gzip-compressed, timed as

* ``ours``: :func:`ultr_jax.data.read_baidu_sessions` (a ``ClickLog``);
* ``full split``: the same rows by splitting every line into all its columns
  (the way a generic TSV parser reads it), ids interned the same way;
* ``gzip lines alone``: only iterating the decompressed lines, the floor.

Run: ``python benchmarks/baidu_load.py``.
"""

import argparse
import gzip
import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.feather
import pyarrow.parquet

from _timing import median_seconds
from ultr_jax import data
from ultr_jax.data import baidu

EMB = 768


def make_tables(pages: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  sizes = rng.integers(3, 11, pages)
  qid = np.repeat(np.arange(pages), sizes)
  position = np.concatenate([rng.permutation(n) + 1 for n in sizes])
  n = len(qid)
  cols = {
    "query_id": qid.astype(np.int32),
    "position": position.astype(np.int32),
    "click": (rng.random(n) < 0.2).astype(np.int32),
  }
  for name in baidu.LTR_FEATURES:
    cols[name] = rng.random(n).astype(np.float32)
  emb = rng.normal(size=(n, EMB)).astype(np.float16)
  doc = pa.table(
    {**cols, "query_document_embedding": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), EMB)}
  )
  offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int32)
  page_cols = {"query_id": np.arange(pages, dtype=np.int32)}
  for name, values in cols.items():
    if name != "query_id":
      page_cols[name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
  page_cols["query_document_embedding"] = pa.ListArray.from_arrays(
    pa.array(offsets), doc["query_document_embedding"].combine_chunks()
  )
  return doc, pa.table(page_cols), n


def row_loop(path, features):
  """Pages by a Python loop over the rows of a document-per-row file."""
  table = pa.feather.read_table(path, columns=["query_id", "position", "click", *features])
  qid = table.column("query_id").to_numpy()
  pos = table.column("position").to_numpy()
  clk = table.column("click").to_numpy()
  cols = []
  for f in features:
    col = table.column(f).combine_chunks()
    cols.append(
      col.flatten().to_numpy().reshape(len(col), -1)
      if pa.types.is_fixed_size_list(col.type)
      else col.to_numpy()[:, None]
    )
  x = np.concatenate(cols, axis=1).astype(np.float32)
  pages, current = [], None
  for r in range(len(qid)):
    if qid[r] != current:
      current = qid[r]
      pages.append([])
    pages[-1].append(r)
  L = int(pos.max())
  feats = np.zeros((len(pages), L, x.shape[1]), np.float32)
  clicks = np.zeros((len(pages), L), np.float32)
  for q, rows in enumerate(pages):
    for r in rows:
      feats[q, pos[r] - 1] = x[r]
      clicks[q, pos[r] - 1] = clk[r]
  return feats, clicks


def write_sessions(path, pages: int, seed: int = 0) -> int:
  rng = np.random.default_rng(seed)
  tokens = lambda n: "\x01".join(map(str, rng.integers(1, 30000, n)))  # noqa: E731
  queries = [tokens(4) for _ in range(max(1, pages // 5))]
  docs = 0
  with gzip.open(path, "wt", encoding="utf-8") as fh:
    for p in range(pages):
      fh.write(f"{p}\t{queries[p % len(queries)]}\t\n")
      n = int(rng.integers(3, 11))
      title, abstract = tokens(20), tokens(120)
      for pos in range(1, n + 1):
        fh.write(
          "\t".join(
            [str(pos), f"{rng.integers(1 << 62):032x}", title, abstract, "0", str(int(rng.random() < 0.2))] + ["0"] * 27
          )
          + "\n"
        )
      docs += n
  return docs


def full_split(path):
  """The same rows as ``read_baidu_sessions`` by splitting every line into all its columns."""
  ids, items, positions, clicks = {}, [], [], []
  query = None
  with gzip.open(path, "rt", encoding="utf-8") as fh:
    for line in fh:
      cols = line.rstrip("\n").split("\t")
      if len(cols) <= 3:
        query = cols[1]
        continue
      items.append(ids.setdefault((query, cols[1]), len(ids)))
      positions.append(int(cols[0]) - 1)
      clicks.append(cols[5] == "1")
  return np.asarray(items, np.int32), np.asarray(positions, np.int32), np.asarray(clicks, np.float32)


def gzip_lines(path):
  with gzip.open(path, "rt", encoding="utf-8") as fh:
    for _ in fh:
      pass


def sessions_table(tmp, pages, repeats):
  path = os.path.join(tmp, "part-00000.gz")
  docs = write_sessions(path, pages)
  log = data.read_baidu_sessions(path)
  items, positions, clicks = full_split(path)
  np.testing.assert_array_equal(log.items, items)
  np.testing.assert_array_equal(log.positions, positions)
  np.testing.assert_array_equal(log.clicks, clicks)
  t_floor = median_seconds(lambda: gzip_lines(path), repeats)
  t_ref = median_seconds(lambda: full_split(path), repeats)
  t = median_seconds(lambda: data.read_baidu_sessions(path), repeats)
  print(f"\nsession file: {pages} pages, {docs} documents, {os.path.getsize(path) / 2**20:.0f} MiB gzip")
  print("| reader | seconds | docs/s | vs ours |")
  print("|---|---|---|---|")
  for name, sec in (("ours (read_baidu_sessions)", t), ("full split", t_ref), ("gzip lines alone", t_floor)):
    print(f"| {name} | {sec:.2f} | {docs / sec:,.0f} | {sec / t:.2f}x |")


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--pages", type=int, default=20000)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--sessions", type=int, default=50000, help="pages in the raw session file (0: skip)")
  args = parser.parse_args()
  doc, page, n = make_tables(args.pages)
  with tempfile.TemporaryDirectory() as tmp:
    doc_path = os.path.join(tmp, "part-0_split-0.feather")
    page_path = os.path.join(tmp, "pages.parquet")
    pa.feather.write_feather(doc, doc_path)
    pa.parquet.write_table(page, page_path)
    print(
      f"{args.pages} pages, {n} documents; feather {os.path.getsize(doc_path) / 2**20:.0f} MiB, "
      f"parquet {os.path.getsize(page_path) / 2**20:.0f} MiB"
    )
    print(
      "| features | file | pyarrow read alone (s) | ours (s) | ours / read | docs/s ours | row loop (s) | "
      "row loop / ours |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, features in (("ltr (12)", baidu.LTR_FEATURES), ("bert (768)", baidu.BERT_FEATURES)):
      ours = data.load_baidu_ultr(doc_path, features=features)
      ref_feats, ref_clicks = row_loop(doc_path, features)
      np.testing.assert_array_equal(ours.features, ref_feats)
      np.testing.assert_array_equal(ours.extras["clicks"], ref_clicks)
      t_ref = median_seconds(lambda: row_loop(doc_path, features), args.repeats)
      columns = ["query_id", "position", "click", *features]
      for file_label, path, read in (
        ("feather, row per document", doc_path, lambda: pa.feather.read_table(doc_path, columns=columns)),
        ("parquet, row per page", page_path, lambda: pa.parquet.read_table(page_path, columns=columns)),
      ):
        t_read = median_seconds(read, args.repeats)
        t = median_seconds(lambda: data.load_baidu_ultr(path, features=features), args.repeats)
        ref = f"{t_ref:.3f} | {t_ref / t:.1f}x" if path == doc_path else "n/a | n/a"
        print(f"| {label} | {file_label} | {t_read:.3f} | {t:.3f} | {t / t_read:.1f}x | {n / t:,.0f} | {ref} |")
    if args.sessions:
      sessions_table(tmp, args.sessions, args.repeats)


if __name__ == "__main__":
  main()
