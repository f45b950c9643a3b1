"""Yandex log reading speed: ultr_jax.data.read_yandex_sessions vs a text-mode per-line reader, same process.

Writes a Relevance Prediction Challenge log (``--pages`` result pages of 10
URL ids in sessions of 1-3 pages, about 0.8 clicks a page, one click in
twenty on a URL the page does not show), gzip-compressed, and times, as the
median of ``--repeats`` runs:

* ``ours``: :func:`ultr_jax.data.read_yandex_sessions` (a ``ClickLog``);
* ``text reader``: the same rows read the way PyClick's parser walks the file
  (decoded text lines, a full split, ``list.index`` for each click), ids
  interned the same way;
* ``gzip lines alone``: only iterating the decompressed lines, the floor.

It checks that both give the same rows and prints pages per second and the ratios.

Run: ``python benchmarks/yandex_load.py``.
"""

import argparse
import gzip
import os
import tempfile
import warnings

import numpy as np

from _timing import median_seconds
from ultr_jax import data


def write_log(path, pages: int, seed: int = 0) -> None:
  rng = np.random.default_rng(seed)
  t, page, session = 0, 0, 0
  with gzip.open(path, "wt", encoding="utf-8") as fh:
    while page < pages:
      for _ in range(int(rng.integers(1, 4))):
        urls = rng.choice(100000, 10, replace=False)
        fh.write(f"{session}\t{t}\tQ\t{rng.integers(20000)}\t213\t" + "\t".join(map(str, urls)) + "\n")
        for _ in range(int(rng.poisson(0.8))):
          t += 1
          url = urls[rng.integers(10)] if rng.random() > 0.05 else 100000 + rng.integers(1000)
          fh.write(f"{session}\t{t}\tC\t{url}\n")
        page += 1
      session += 1


def text_reader(path):
  """The same rows as ``read_yandex_sessions`` (relpred), read line by line as text."""
  ids, items, clicks = {}, [], []
  urls, first = [], 0
  with gzip.open(path, "rt", encoding="utf-8") as fh:
    for line in fh:
      cols = line.rstrip("\n").split("\t")
      if cols[2] == "Q":
        urls, first = cols[5:], len(items)
        for u in urls:
          items.append(ids.setdefault((cols[3], u), len(ids)))
          clicks.append(0.0)
      elif cols[3] in urls:
        clicks[first + urls.index(cols[3])] = 1.0
  return np.asarray(items, np.int32), np.asarray(clicks, np.float32)


def gzip_lines(path):
  with gzip.open(path, "rt", encoding="utf-8") as fh:
    for _ in fh:
      pass


def read(path):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # the stray clicks
    return data.read_yandex_sessions(path)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--pages", type=int, default=200000)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "train.gz")
    write_log(path, args.pages)
    log = read(path)
    items, clicks = text_reader(path)
    np.testing.assert_array_equal(log.items, items)
    np.testing.assert_array_equal(log.clicks, clicks)
    t_floor = median_seconds(lambda: gzip_lines(path), args.repeats)
    t_ref = median_seconds(lambda: text_reader(path), args.repeats)
    t = median_seconds(lambda: read(path), args.repeats)
    print(
      f"{args.pages} pages, {len(log.items)} rows, {int(log.clicks.sum())} clicks, "
      f"{os.path.getsize(path) / 2**20:.0f} MiB gzip"
    )
    print("| reader | seconds | pages/s | vs ours |")
    print("|---|---|---|---|")
    for name, sec in (("ours (read_yandex_sessions)", t), ("text reader", t_ref), ("gzip lines alone", t_floor)):
      print(f"| {name} | {sec:.2f} | {args.pages / sec:,.0f} | {sec / t:.2f}x |")


if __name__ == "__main__":
  main()
