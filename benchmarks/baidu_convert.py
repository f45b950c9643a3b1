"""Baidu-ULTR's per-document files to feature shards: time and peak memory of ``data.convert_baidu_ultr``.

``write`` generates a file like the hub's Baidu-ULTR click files, record batch by record batch (never whole in
memory): one row per shown document (``query_id``, ``position``, ``click``, the 768-d float16
``query_document_embedding`` and the 12 lexical features as float32), pages of 3 to 10 documents listed in a
shuffled position order, as LZ4-compressed Feather V2 in record batches of 65,536 rows (what
``pyarrow.feather.write_feather`` writes), about ``--gb`` GB. ``convert`` converts it
(:func:`ultr_jax.data.convert_baidu_ultr`, ``features="bert"`` plus the lexical ones: F = 780) and prints the
time, the rate and the peak resident memory; ``stream`` reads the shards once with
:class:`ultr_jax.data.FeatureStream`. Run each phase in its own process, under ``/usr/bin/time -v`` for the
peak RSS:

  python benchmarks/baidu_convert.py write --gb 2 --path /tmp/baidu/part-0.feather
  /usr/bin/time -v python benchmarks/baidu_convert.py convert --path /tmp/baidu/part-0.feather \
      --out /tmp/baidu/shards
  /usr/bin/time -v python benchmarks/baidu_convert.py stream --out /tmp/baidu/shards
"""

import argparse
import os
import pathlib
import resource
import time

import numpy as np

EMB = 768
LTR = 12
BATCH = 1 << 16


def write(path: str, gb: float, seed: int = 0) -> None:
  import pyarrow as pa  # noqa: PLC0415
  import pyarrow.ipc  # noqa: PLC0415,F401

  from ultr_jax.data import LTR_FEATURES  # noqa: PLC0415

  rng = np.random.default_rng(seed)
  row_bytes = 2 * EMB + 4 * LTR + 4 + 4 + 8
  rows = int(gb * 1e9 / row_bytes)
  fields = [("query_id", pa.int64()), ("position", pa.int32()), ("click", pa.int32())]
  fields += [(name, pa.float32()) for name in LTR_FEATURES]
  fields.append(("query_document_embedding", pa.list_(pa.float16(), EMB)))
  schema = pa.schema(fields)
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  # Pages of 3-10 documents, each listed in a shuffled position order (12 bytes a row: small beside the file).
  sizes = rng.integers(3, 11, rows // 3 + 1)
  sizes = sizes[: int(np.searchsorted(np.cumsum(sizes), rows)) + 1]
  qid = np.repeat(np.arange(len(sizes)), sizes)[:rows]
  first = np.repeat(np.cumsum(sizes) - sizes, sizes)[:rows]
  order = np.lexsort((rng.random(rows), qid))  # rows of each page in a random order
  position = np.empty(rows, np.int32)
  position[order] = np.arange(rows) - first + 1
  options = pa.ipc.IpcWriteOptions(compression="lz4")
  with pa.ipc.new_file(path, schema, options=options) as w:
    for a in range(0, rows, BATCH):
      n = min(BATCH, rows - a)
      cols = [pa.array(qid[a : a + n]), pa.array(position[a : a + n])]
      cols.append(pa.array((rng.random(n) < 0.2).astype(np.int32)))
      cols += [pa.array(rng.random(n, dtype=np.float32)) for _ in range(LTR)]
      emb = rng.standard_normal(n * EMB, dtype=np.float32).astype(np.float16)
      cols.append(pa.FixedSizeListArray.from_arrays(pa.array(emb), EMB))
      w.write_batch(pa.record_batch(cols, schema=schema))
  written = rows
  size = os.path.getsize(path)
  print(f"wrote {path}: {written:,} rows, {size / 1e9:.2f} GB, {time.perf_counter() - t0:.1f} s")


def _rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def convert(path: str, out: str, batch_rows: int) -> None:
  from ultr_jax import data  # noqa: PLC0415

  features = data.BERT_FEATURES + data.LTR_FEATURES
  before = _rss_mb()
  t0 = time.perf_counter()
  shards = data.convert_baidu_ultr(path, out, features=features, batch_rows=batch_rows)
  dt = time.perf_counter() - t0
  size_in = os.path.getsize(path)
  size_out = sum(os.path.getsize(p) for p in shards)
  import pyarrow.parquet as pq  # noqa: PLC0415

  pages = sum(pq.ParquetFile(p).metadata.num_rows for p in shards)
  if path.endswith(".parquet"):
    rows = pq.ParquetFile(path).metadata.num_rows
  else:
    import pyarrow as pa  # noqa: PLC0415

    with pa.memory_map(path) as src:
      rows = pa.ipc.open_file(src).count_rows()
  print(
    f"converted {rows:,} documents ({pages:,} pages, {size_in / 1e9:.2f} GB) in {dt:.1f} s: {rows / dt:,.0f} docs/s, "
    f"{size_in / 1e6 / dt:.0f} MB/s in; {len(shards)} shards, {size_out / 1e9:.2f} GB; peak RSS {_rss_mb():.0f} MB "
    f"({before:.0f} MB after the imports)"
  )


def stream(out: str, batch_size: int) -> None:
  from ultr_jax import data  # noqa: PLC0415

  t0 = time.perf_counter()
  s = data.FeatureStream(out, batch_size=batch_size, process_index=0, process_count=1)
  docs = pages = 0
  for b in s:
    docs += int(b["where"].sum())
    pages += int((b["qid"] >= 0).sum())
  dt = time.perf_counter() - t0
  print(
    f"streamed {pages:,} pages ({docs:,} documents, L = {s.list_size}, F = {s.num_features}) in {dt:.1f} s: "
    f"{docs / dt:,.0f} docs/s; peak RSS {_rss_mb():.0f} MB"
  )


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("phase", choices=["write", "convert", "stream"])
  p.add_argument("--path", default="/tmp/baidu_convert/part-0.feather")
  p.add_argument("--out", default="/tmp/baidu_convert/shards")
  p.add_argument("--gb", type=float, default=2.0)
  p.add_argument("--batch_rows", type=int, default=1 << 12)
  p.add_argument("--batch_size", type=int, default=256)
  a = p.parse_args()
  if a.phase == "write":
    write(a.path, a.gb)
  elif a.phase == "convert":
    convert(a.path, a.out, a.batch_rows)
  else:
    stream(a.out, a.batch_size)


if __name__ == "__main__":
  main()
