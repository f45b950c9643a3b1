"""The studies' summaries over seeds: one method's results entry and table row, the best method and its ties.

The tables themselves are written by :func:`~ultr_jax.train.write_results` (``results.json``, ``table.md``
through :func:`~ultr_jax.train.markdown_table`, ``table.csv``).
"""

from typing import Any, Mapping, Sequence

import numpy as np

from ultr_jax.train import summarize

__all__ = ["best_and_ties", "summarize_metrics"]


def best_and_ties(per_seed: Mapping[Any, Sequence[float]], *, higher_is_better: bool = True) -> tuple[Any, list]:
  """The key with the best mean, and the keys the best does not beat over seeds.

  A key is tied with the best when the 90% t-interval of its seed-paired difference to the best includes 0
  (the seeds cannot tell them apart); keys with another number of seeds, or a single seed, cannot be paired
  and are not tied. The ties come in order of their means, best first.

  >>> best_and_ties({"a": [0.90, 0.91, 0.92], "b": [0.91, 0.91, 0.93], "c": [0.80, 0.81, 0.82]})
  ('b', ['a'])
  >>> best_and_ties({"a": [1.30, 1.31], "b": [1.35, 1.36]}, higher_is_better=False)
  ('a', [])
  """
  sign = 1.0 if higher_is_better else -1.0
  means = {k: sign * float(np.mean(v)) for k, v in per_seed.items()}
  best = max(means, key=lambda k: means[k])
  ref = np.asarray(per_seed[best], np.float64)
  tied = []
  for k in sorted(means, key=lambda k: means[k], reverse=True):
    diff = np.asarray(per_seed[k], np.float64) - ref
    if k != best and diff.shape == ref.shape and diff.size > 1:
      s = summarize(diff)
      if abs(s["mean"]) <= s["ci90"]:
        tied.append(k)
  return best, tied


def summarize_metrics(per_seed: Mapping[str, Any], names: Sequence[str]) -> tuple[dict, dict]:
  """One method's ``results.json`` entry and table row from per-seed metric arrays.

  Returns ``(entry, row)``: ``entry`` maps each name to its mean and holds
  ``std``, ``ci90`` and ``per_seed`` dicts; ``row`` maps each name to its
  :func:`summarize` dict (for :func:`~ultr_jax.train.markdown_table`).

  >>> entry, row = summarize_metrics({"ndcg@10": [0.5, 0.7]}, ["ndcg@10"])
  >>> round(entry["ndcg@10"], 3), entry["per_seed"]["ndcg@10"], round(row["ndcg@10"]["std"], 4)
  (0.6, [0.5, 0.7], 0.1414)
  """
  entry: dict[str, Any] = {}
  row: dict[str, Any] = {}
  for name in names:
    s = summarize(per_seed[name])
    entry[name] = s["mean"]
    entry.setdefault("std", {})[name] = s["std"]
    entry.setdefault("ci90", {})[name] = s["ci90"]
    entry.setdefault("per_seed", {})[name] = np.asarray(per_seed[name]).tolist()
    row[name] = s
  return entry, row
