"""The studies' data: data and logging-policy configs, loaders, logged-click checks.

:func:`load_datasets` reads a ``config.data`` (synthetic default, SVMlight / LightGBM / ULTRA files, or
Baidu-ULTR's click logs with their expert annotations); :func:`prepare_logged_data` trains the logging
policy on a small labelled fraction and keeps its displayed top-k lists. The baselines study that
trains every method on them is :mod:`ultr_jax.studies.baselines`.
"""

import dataclasses
import glob
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from ultr_jax import data as data_lib
from ultr_jax._state_files import read_state_file
from ultr_jax import simulation
from ultr_jax.train import evaluate
from ultr_jax.train import methods as methods_lib  # noqa: F401  (the doctests')
from ultr_jax.train.method import KEY_REASONS, method_inputs_missing

__all__ = [
  "default_data_config",
  "default_logging_policy_config",
  "load_datasets",
  "prepare_logged_data",
  "true_position_propensities",
  "by_frequency_bucket",
  "check_logged_click_method",
  "hold_out_pages",
  "with_position_propensities",
]


def default_data_config() -> ml_collections.ConfigDict:
  """The embedded default data (synthetic, seed 0, 1000/200/200 queries of 20 docs, 32 features).

  ``source`` may be ``synthetic``, ``svmlight`` (``train_path``,
  ``valid_path``, ``test_path``, optional ``normalize``), ``ultra``
  (``path``) or ``baidu`` (logged clicks: ``train_path``, ``valid_path``,
  ``test_path`` as glob patterns, ``features``, ``max_sessions``,
  ``feature_dtype``, ``click_test_fraction``, optional ``normalize`` and
  ``propensities``); see
  :func:`load_datasets`. Shared by the studies that use the baselines' data
  so that they stay on the same lists.

  >>> default_data_config().num_train
  1000
  """
  return ml_collections.ConfigDict(
    {
      "source": "synthetic",
      "seed": 0,
      "num_train": 1000,
      "num_valid": 200,
      "num_test": 200,
      "list_size": 20,
      "num_features": 32,
      "train_path": "",
      "valid_path": "",
      "test_path": "",
      "path": "",
      "normalize": "",
      "features": "bert",
      "max_sessions": 0,
      "propensities": "",
      "feature_dtype": "float32",
      "click_test_fraction": 0.1,
    }
  )


def default_logging_policy_config() -> ml_collections.ConfigDict:
  """ULTRA's protocol: a production ranker fit on 1% of the labelled training queries shows its top 10.

  >>> default_logging_policy_config().top_k
  10
  """
  return ml_collections.ConfigDict({"fraction": 0.01, "seed": 0, "steps": 500, "top_k": 10})


def _files(pattern: str, field: str) -> list[str]:
  paths = sorted(glob.glob(pattern)) if pattern else []
  if not paths:
    raise ValueError(f"config.data.{field}: no file matches {pattern!r}")
  return paths


def with_position_propensities(train, source: str, *, field: str = "propensities"):
  """``train`` with ``extras["examination"]`` set from given position propensities (position 1 first).

  For IPS on logged clicks, whose propensities no simulator knows (a single IPS or SNIPS method can
  instead take them as ``method_configs.<name>.propensities``; this sets them once for every method,
  from a file): ``source`` is comma-separated
  numbers; an existing text/CSV file with one position per line whose last column is the
  propensity (so a ``position,propensity`` table works; a header line is skipped); or the JSON
  that ``experiments/identifiability/check.py --click_log=...`` writes, as ``report.json`` (its
  all-pairs estimates) or ``report.json:pivot`` (another harvesting method), so propensities
  harvested from the raw log feed IPS on its features.

  >>> ds = data_lib.RankingDataset(features=np.zeros((1, 3, 1), np.float32), labels=np.zeros((1, 3), np.float32),
  ...                              where=np.array([[True, True, False]]), qid=np.array([0]))
  >>> with_position_propensities(ds, "1, 0.5, 0.25, 0.1").extras["examination"].tolist()
  [[1.0, 0.5, 0.0]]
  """
  json_path, method = source, "all_pairs"
  if ".json:" in source:
    json_path, method = source.rsplit(":", 1)
  if json_path.endswith(".json"):
    if not os.path.isfile(json_path):
      raise ValueError(f"{field}: no such file {json_path!r}")
    report = read_state_file(
      json_path,
      {"propensities": {f"{method}?": [(int, float, type(None))]}},  # a method it lacks: named below
      what=f"the identifiability check's report.json with the {method!r} propensities per position (null: not "
      "identified)",
      recovery="write it again with experiments/identifiability/check.py --click_log=... (or name another method "
      "after the colon, report.json:pivot)",
    )
    harvested = report["propensities"]
    if method not in harvested:
      raise ValueError(
        f"{json_path}: no propensities of {method!r} (it has {sorted(harvested)}); write it with "
        "experiments/identifiability/check.py --click_log=..."
      )
    values = harvested[method]
    missing = [k + 1 for k, v in enumerate(values[: train.list_size]) if v is None]
    if missing:
      raise ValueError(f"{json_path}: the log does not identify the {method} propensities of positions {missing}")
  elif os.path.isfile(source):
    values = []
    with open(source, encoding="utf-8") as fh:
      for line_no, line in enumerate(fh, 1):
        parts = line.replace(",", " ").split()
        if not parts:
          continue
        try:
          values.append(float(parts[-1]))
        except ValueError:
          if line_no > 1:
            raise ValueError(f"{source}:{line_no}: field 'propensity': {parts[-1]!r} is not a number") from None
  else:
    try:
      values = [float(v) for v in source.split(",") if v.strip()]
    except ValueError:
      raise ValueError(f"{field}: {source!r} is neither comma-separated numbers nor an existing file") from None
  prop = np.asarray(values, np.float32)
  if len(prop) < train.list_size:
    raise ValueError(f"{field}: {len(prop)} propensities for lists of {train.list_size} positions")
  if not np.all(np.isfinite(prop) & (prop > 0)):
    raise ValueError(f"{field}: propensities must be finite and > 0, got {prop.tolist()}")
  exam = np.where(train.where, prop[: train.list_size], 0.0).astype(np.float32)
  return dataclasses.replace(train, extras={**train.extras, "examination": exam})


def _load_baidu(d) -> tuple[Any, Any, Any]:
  """Baidu-ULTR: click files for training, annotation files for validation and test."""
  features = d.get("features") or "bert"
  if features not in ("bert", "ltr"):
    features = tuple(name.strip() for name in features.split(",") if name.strip())
  max_sessions = int(d.get("max_sessions") or 0) or None
  # float16 halves host and device memory for the 768-d embeddings (stored as float16); the methods
  # compute in float32.
  dtype = np.dtype(d.get("feature_dtype") or "float32")
  if dtype.kind != "f":
    raise ValueError(f"config.data.feature_dtype: expected a float dtype, got {d.feature_dtype!r}")
  dtype = dtype.type  # the scalar type, as load_baidu_ultr's default np.float32
  train = data_lib.load_baidu_ultr(
    _files(d.train_path, "train_path"), features=features, max_sessions=max_sessions, dtype=dtype
  )
  if "clicks" not in train.extras:
    raise ValueError(
      f"config.data.train_path={d.train_path!r}: the files have no 'click' column; the "
      "training split of source='baidu' is Baidu-ULTR's click data"
    )
  if d.get("propensities"):
    train = with_position_propensities(train, d.propensities, field="config.data.propensities")
  test = data_lib.load_baidu_ultr(_files(d.test_path, "test_path"), features=features, dtype=dtype)
  if d.get("valid_path"):
    valid = data_lib.load_baidu_ultr(_files(d.valid_path, "valid_path"), features=features, dtype=dtype)
  else:  # half of the annotated queries for model selection, as Hager et al. split them
    valid, test = data_lib.train_valid_test_split(test, (0.5, 0.5, 0.0), seed=d.seed)[:2]
  return train, valid, test


def _normalized(d, train, valid, test) -> tuple[Any, Any, Any]:
  """The three splits with ``d.normalize`` applied (none when it is empty)."""
  if not d.get("normalize"):
    return train, valid, test
  # Per-query methods need no statistics; global ones are fitted on the training split only.
  norm = None if d.normalize.startswith("query_") else data_lib.fit_normalizer([train], d.normalize)
  train, valid, test = (data_lib.normalize_features(x, method=d.normalize, stats=norm) for x in (train, valid, test))
  return train, valid, test


def load_datasets(config: ml_collections.ConfigDict, *, logged_clicks: bool = False) -> tuple[Any, Any, Any]:
  """(train, valid, test) ``RankingDataset``s named by ``config.data``.

  ``config.data.source`` is ``"synthetic"`` (the embedded default,
  deterministic from ``config.data.seed``), ``"svmlight"`` (``train_path``,
  ``valid_path``, ``test_path``; LightGBM-style ``.query`` files are picked
  up when present), ``"ultra"`` (ULTRA-format directories) or ``"baidu"``
  (Baidu-ULTR's Arrow/Parquet files, see
  :func:`~ultr_jax.data.load_baidu_ultr`: ``train_path`` matches click
  files, ``test_path`` and ``valid_path`` annotation files; without
  ``valid_path`` the annotated queries are split in half).

  ``logged_clicks``: the caller trains on logged clicks as they were shown
  (only the baselines study does); the other studies simulate clicks from
  graded labels, so ``"baidu"`` raises for them.
  """
  d = config.data
  splits = _load_splits(d, logged_clicks)
  for name, ds in zip(("train", "valid", "test"), splits):
    _check_not_degenerate(d, name, ds, positives=name != "train" or not logged_clicks)
  return splits


def _check_not_degenerate(d, name: str, ds, *, positives: bool) -> None:
  """Refuses a split with no features (nothing to rank by) or, where labels are read, no positive label (no
  click can be simulated and every ranker's nDCG is 0), naming the source and the split."""
  source = f"config.data (source {d.source!r}, the {name} split)"
  if ds.num_features == 0:
    hint = " (config.data.num_features=0 gives no features to the synthetic source)" if d.source == "synthetic" else ""
    raise ValueError(f"{source}: the lists have no features: there is nothing to rank by{hint}")
  if positives and not np.any(ds.labels[ds.where] > 0):
    raise ValueError(
      f"{source}: no document has a positive label ({int(ds.where.sum())} documents, all labelled 0): no click "
      "can be simulated and every ranker's nDCG is 0"
    )


def _load_splits(d, logged_clicks: bool) -> tuple[Any, Any, Any]:
  """:func:`load_datasets`'s three splits as the source holds them."""
  if d.source == "baidu":
    if not logged_clicks:
      raise ValueError(
        "config.data.source='baidu' holds logged clicks and no training labels; this study "
        "simulates clicks from labels. The baselines study trains on logged clicks "
        "(experiments/baselines/main.py)."
      )
    return _normalized(d, *_load_baidu(d))
  if d.source == "synthetic":
    splits = data_lib.make_synthetic(
      num_train=d.num_train,
      num_valid=d.num_valid,
      num_test=d.num_test,
      list_size=d.list_size,
      num_features=d.num_features,
      seed=d.seed,
    )
    return splits.train, splits.valid, splits.test
  if d.source == "svmlight":
    load = lambda p: data_lib.load_svmlight(p, num_features=d.get("num_features") or None)
    train = load(d.train_path)
    test = load(d.test_path)
    if d.get("valid_path"):
      valid = load(d.valid_path)
    else:
      train, valid = data_lib.train_valid_test_split(train, (0.8, 0.2, 0.0), seed=d.seed)[:2]
    return _normalized(d, train, valid, test)
  if d.source == "ultra":
    train, valid, test = (
      data_lib.load_ultra(d.path, split, with_features=True) for split in ("train", "valid", "test")
    )
    return train, valid, test
  raise ValueError(f"unknown data source {d.source!r} (synthetic, svmlight, ultra, baidu)")


def prepare_logged_data(train, valid, test, config: ml_collections.ConfigDict):
  """Orders every list by a logging policy trained on a labelled fraction.

  Returns the (train, valid, test) datasets with item ``i`` displayed at
  position ``i``; train/valid lists are cut to the displayed top-k
  (``config.logging_policy.top_k``), test lists keep every candidate.
  """
  lp = config.logging_policy
  weights = simulation.train_logging_policy(train, fraction=lp.fraction, seed=lp.seed, steps=lp.steps)
  ordered = []
  for ds, top_k in ((train, lp.top_k), (valid, lp.top_k), (test, None)):
    scores = simulation.logging_policy_scores(weights, ds)
    ordered.append(simulation.apply_logging_policy(ds, scores, top_k=top_k))
  return tuple(ordered)


def true_position_propensities(click_fn, ds, key) -> np.ndarray:
  """Mean true examination per displayed position (relative to position 1)."""
  batch = jax.tree.map(jnp.asarray, ds.as_batch())
  out = click_fn(key, batch)
  exam = np.asarray(out["examination"], np.float64)
  where = ds.where
  per_pos = (exam * where).sum(0) / np.maximum(where.sum(0), 1)
  return per_pos / per_pos[0]


def hold_out_pages(train, fraction: float, *, seed: int = 0):
  """``(train, held)``: a random ``fraction`` of the pages (at least one) held out, the rest in file order.

  >>> ds = data_lib.make_synthetic(num_train=10, num_valid=1, num_test=1, list_size=3, num_features=2).train
  >>> rest, held = hold_out_pages(ds, 0.2)
  >>> rest.num_queries, held.num_queries, sorted(set(rest.qid) | set(held.qid)) == sorted(ds.qid)
  (8, 2, True)
  """
  if not 0 < fraction < 1:
    raise ValueError(f"config.data.click_test_fraction must be in (0, 1), got {fraction}")
  order = np.random.default_rng(seed).permutation(train.num_queries)
  n = max(1, int(round(fraction * train.num_queries)))
  if n >= train.num_queries:
    raise ValueError(f"config.data.click_test_fraction={fraction} leaves no training page of {train.num_queries}")
  return train.subset(np.sort(order[n:])), train.subset(np.sort(order[:n]))


def by_frequency_bucket(method, params, test, *, dcg_cutoffs=()) -> dict:
  """Test nDCG@10 (and DCG@k for ``dcg_cutoffs``; means over seeds) per ``test.extras["frequency_bucket"]``.

  Baidu-ULTR's annotated queries come in 10 buckets of monthly search frequency (0: the most frequent);
  Hager et al. (SIGIR 2024) break their results down by them. Keys are the buckets as strings.

  >>> test = data_lib.make_synthetic(num_train=1, num_valid=1, num_test=6, list_size=4, num_features=2).test
  >>> test = test.with_extras(frequency_bucket=np.array([0, 0, 1, 1, 1, 9]))
  >>> m = methods_lib.get_method("naive", {"ranker": "linear"}, num_features=2, list_size=4)
  >>> params = jax.vmap(lambda k: m.init(k, None)[0])(jax.random.split(jax.random.key(0), 2))
  >>> {b: v["queries"] for b, v in by_frequency_bucket(m, params, test).items()}
  {'0': 2, '1': 3, '9': 1}
  """
  buckets = np.asarray(test.extras["frequency_bucket"])
  values, counts = np.unique(buckets, return_counts=True)
  out = {}
  for b, n in zip(values, counts):
    # Every bucket padded to the largest one's query count (all-masked queries count for nothing), so the
    # evaluation compiles once, not once per bucket size.
    idx = np.full(counts.max(), -1)
    idx[:n] = np.flatnonzero(buckets == b)
    metrics = evaluate(method, params, data_lib.take_queries(test, idx), cutoffs=(10,), dcg_cutoffs=dcg_cutoffs)
    out[str(int(b))] = {
      **{k: float(np.mean(metrics[k])) for k in ("ndcg@10", *(f"dcg@{c}" for c in dcg_cutoffs))},
      "queries": int(n),
    }
  return out


def check_logged_click_method(method, train) -> None:
  """Raises unless ``method`` can train on ``train``'s logged clicks alone.

  Methods that read an oracle quantity of the click simulator (IPS's
  ``"examination"`` propensities, say) cannot, nor can ``full_info`` when the
  log has no relevance labels; the error names the entry.

  >>> ds = data_lib.make_synthetic(num_train=4, num_valid=1, num_test=1, list_size=3, num_features=2).train
  >>> log = data_lib.RankingDataset(features=ds.features, labels=0 * ds.labels, where=ds.where, qid=ds.qid,
  ...                               extras={"clicks": (ds.labels > 1).astype(np.float32)})
  >>> get = lambda name: methods_lib.get_method(name, {"ranker": "linear"}, num_features=2, list_size=3)
  >>> check_logged_click_method(get("dla"), log)  # trains on clicks alone
  >>> check_logged_click_method(get("ips"), log)  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  ValueError: method 'ips' reads batch['examination'], which logged clicks do not carry ...
  """
  batch = jax.tree.map(jnp.asarray, train.as_batch(np.arange(min(2, train.num_queries))))
  if not train.labels.any():  # a click log has no relevance labels (the loader fills zeros)
    batch.pop("labels")
  missing = method_inputs_missing(method, batch)
  if missing is not None:
    fix = {
      "examination": (
        "give position propensities with config.data.propensities (every method) or "
        f"method_configs.{method.name}.propensities (ips and snips)"
      ),
      "labels": "evaluate the labels' ceiling on annotated data instead",
    }.get(missing, f"add {missing!r} to the training data's extras")
    raise ValueError(
      f"method {method.name!r} reads batch[{missing!r}], which logged clicks do not carry "
      f"(it {KEY_REASONS.get(missing, 'needs that entry')}); leave the method out of "
      f"config.methods or {fix}"
    )
