"""Evaluation of trained rankers: ranking metrics (:func:`evaluate`), scores (:func:`predict`) and held-out click
metrics of click models (:func:`evaluate_clicks`), in padded chunks of one shape (each compiles once)."""

import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax import metrics as metrics_lib
from ultr_jax.data import RankingDataset
from ultr_jax.train.defaults import DEFAULT_CUTOFFS
from ultr_jax.train.method import Method

__all__ = ["evaluate", "evaluate_clicks", "predict"]


def _metric_names(cutoffs: Sequence[int]) -> list[str]:
  return [f"ndcg@{k}" for k in cutoffs] + ["err@10", "mrr", "map"]


@functools.partial(jax.jit, static_argnames=("score_fn",))
def _score_chunk(params, batch, *, score_fn):
  return jax.vmap(score_fn, in_axes=(0, None))(params, batch)  # [S, C, L]


@jax.jit
def _finite_chunk(scores, where):
  """``bool[S]``: every real item's score is finite (``scores [S, C, L]``)."""
  return jnp.all(jnp.isfinite(scores) | ~where[None], axis=(1, 2))


# Separate from the scores so that every method shares one compiled metrics
# graph per chunk shape (the metrics' sorts dominate compile time).
@functools.partial(jax.jit, static_argnames=("cutoffs", "dcg_cutoffs"))
def _metrics_chunk(scores, labels, where, *, cutoffs, dcg_cutoffs=()):
  return jax.vmap(
    lambda s: metrics_lib.ranking_metrics(s, labels, where=where, cutoffs=cutoffs, dcg_cutoffs=dcg_cutoffs)
  )(scores)


def evaluate(
  method: Method,
  params: Any,
  dataset: RankingDataset,
  *,
  cutoffs: Sequence[int] = DEFAULT_CUTOFFS,
  batch_size: int = 512,
  drop_no_relevant: bool = False,
  dcg_cutoffs: Sequence[int] = (),
) -> dict[str, np.ndarray]:
  """Ranking metrics of ``method.score`` on ``dataset``, per seed.

  Args:
    method: the trained method.
    params: its params with a leading seed axis ``[S, ...]``.
    dataset: the lists to rank (labels are the graded relevance).
    cutoffs: nDCG cutoffs.
    batch_size: queries per jitted chunk (the last chunk is padded, so the
      evaluation compiles once).
    drop_no_relevant: if False (default), a query whose IDCG is 0 scores 0
      and is averaged in (the ULTRA / identifiability convention); if True
      such queries are left out of the mean.
    dcg_cutoffs: cut-offs of the unnormalised DCG (``"dcg@k"``, the metric of
      Baidu-ULTR's annotations; :func:`ultr_jax.metrics.dcg`); none by default.

  Returns:
    ``{"ndcg@1", ..., "err@10", "mrr", "map"}`` (and ``"dcg@k"``) each a ``float64[S]`` array. A seed
    whose scores are not all finite (a diverged model) gets NaN for every metric: NaN scores would
    rank as ties, and the metric would be the stored order's.

  >>> from ultr_jax import data
  >>> from ultr_jax.train import get_method
  >>> test = data.make_synthetic(num_train=1, num_valid=1, num_test=8, list_size=5, num_features=4).test
  >>> m = get_method("naive", {"ranker": "linear"}, num_features=4, list_size=5)
  >>> params = jax.vmap(lambda k: m.init(k, None)[0])(jax.random.split(jax.random.key(0), 2))
  >>> sorted(evaluate(m, params, test, cutoffs=(3,)))
  ['err@10', 'map', 'mrr', 'ndcg@3']
  >>> evaluate(m, params, test)["ndcg@10"].shape  # one value per seed
  (2,)
  >>> sorted(evaluate(m, params, test, cutoffs=(3,), dcg_cutoffs=(1,)))
  ['dcg@1', 'err@10', 'map', 'mrr', 'ndcg@3']
  >>> bad = jax.tree.map(lambda x: x.at[1].set(jnp.nan), params)  # seed 1 diverged
  >>> np.isnan(evaluate(m, bad, test)["ndcg@10"]).tolist()
  [False, True]
  """
  cutoffs = tuple(int(k) for k in cutoffs)
  dcg_cutoffs = tuple(int(k) for k in dcg_cutoffs)
  sums, count = None, np.zeros((), np.float64)
  labels_all, where_all = np.asarray(dataset.labels), np.asarray(dataset.where, bool)
  has_rel = np.any((labels_all > 0) & where_all, axis=-1)
  counted_all: np.ndarray = np.any(where_all, axis=-1) & has_rel if drop_no_relevant else np.any(where_all, axis=-1)
  finite = None
  for idx, batch in _padded_chunks(dataset, batch_size):
    scores = _score_chunk(params, batch, score_fn=method.score)
    ok = np.asarray(jax.device_get(_finite_chunk(scores, batch["where"])))
    finite = ok if finite is None else finite & ok
    per_query = jax.device_get(
      _metrics_chunk(scores, batch["labels"], batch["where"], cutoffs=cutoffs, dcg_cutoffs=dcg_cutoffs)
    )
    counted = np.where(idx >= 0, counted_all[np.maximum(idx, 0)], False).astype(np.float64)  # [C]
    part = {k: (np.asarray(v, np.float64) * counted).sum(-1) for k, v in per_query.items()}
    sums = part if sums is None else {k: sums[k] + part[k] for k in sums}
    count = count + counted.sum()
  assert sums is not None and finite is not None  # a dataset has at least one chunk
  return {k: np.where(finite, v / max(count, 1.0), np.nan) for k, v in sums.items()}


def _padded_chunks(dataset: RankingDataset, batch_size: int):
  """``(idx, batch)`` chunks of ``batch_size`` queries; the last is padded (``idx = -1``, all-masked lists).

  Every chunk has one shape, so what a chunk is fed to compiles once.
  """
  q = dataset.num_queries
  chunk = max(1, min(batch_size, q))
  for start in range(0, q, chunk):
    idx = np.arange(start, start + chunk)
    idx = np.where(idx < q, idx, -1).astype(np.int32)
    batch = {k: v for k, v in dataset.as_batch(np.maximum(idx, 0)).items() if k != "qid"}
    batch["where"] = batch["where"] & (idx >= 0)[:, None]
    yield idx, jax.tree.map(jnp.asarray, batch)


def predict(method: Method, params: Any, dataset: RankingDataset, *, batch_size: int = 512) -> np.ndarray:
  """``method.score`` of every list of ``dataset``, per seed: the scores to rank by, ``float32[S, Q, L]``.

  The relevance tower only (no clicks, no positions), as :func:`evaluate` ranks; padding scores
  ``-inf`` so that any sort puts it last. ``params`` carry a leading seed axis, as :func:`fit` returns
  them (``jax.tree.map(lambda x: x[None], p)`` for one model). Chunks of ``batch_size`` queries are padded,
  so it compiles once. :func:`~ultr_jax.train.write_run` writes a TREC run file from the result.

  Args:
    method: the trained :class:`Method`.
    params: its parameters, with a leading seed axis.
    dataset: the :class:`~ultr_jax.data.RankingDataset` to score.
    batch_size: queries per chunk.

  Returns:
    ``float32[S, Q, L]`` scores, ``-inf`` at padding.

  >>> from ultr_jax import data, metrics
  >>> from ultr_jax.train import get_method
  >>> test = data.make_synthetic(num_train=1, num_valid=1, num_test=8, list_size=5, num_features=4).test
  >>> m = get_method("naive", {"ranker": "linear"}, num_features=4, list_size=5)
  >>> params = jax.vmap(lambda k: m.init(k, None)[0])(jax.random.split(jax.random.key(0), 2))
  >>> scores = predict(m, params, test, batch_size=3)
  >>> scores.shape
  (2, 8, 5)
  >>> ours = metrics.ndcg(jnp.asarray(scores[0]), jnp.asarray(test.labels), where=test.where, topn=10)
  >>> bool(np.isclose(ours, evaluate(m, params, test)["ndcg@10"][0]))
  True
  """
  out = []
  for idx, batch in _padded_chunks(dataset, batch_size):
    scores = np.asarray(jax.device_get(_score_chunk(params, batch, score_fn=method.score)), np.float32)
    out.append(np.where(np.asarray(batch["where"])[None], scores, -np.inf)[:, idx >= 0])
  return np.concatenate(out, axis=1)


@functools.partial(jax.jit, static_argnames=("logits_fn",))
def _click_chunk(params, extra, batch, *, logits_fn):
  """Per-rank sums of the click log-likelihood ``[S, L]`` of one chunk."""
  z = jax.vmap(logits_fn, in_axes=(0, 0, None))(params, extra, batch)  # [S, C, L]
  ll = jax.vmap(
    lambda zz: metrics_lib.click_log_likelihood(zz, batch["clicks"], where=batch["where"], logits=True, reduce_fn=None)
  )(z)
  return jnp.sum(ll, axis=1)


def evaluate_clicks(
  method: Method, params: Any, extra: Any, dataset: RankingDataset, *, batch_size: int = 512
) -> dict[str, np.ndarray]:
  r"""Held-out click metrics of a method that is a click model (it has ``click_logits``), per seed.

  ``click_ll``: the mean Bernoulli log-likelihood of the held-out clicks per shown document (nats);
  ``click_perplexity``: :math:`2^{-\frac{1}{N_r}\sum \log_2 P(C = c)}` per rank, averaged over
  the ranks that hold documents (Dupret & Piwowarski; 1 is perfect, 2 a coin), as
  :func:`ultr_jax.metrics.click_perplexity`. ``dataset`` carries ``clicks`` (logged sessions);
  chunks of ``batch_size`` pages are padded, so it compiles once.

  Args:
    method: a click-model :class:`Method` (with ``click_logits``).
    params: its parameters, with a leading seed axis (as :func:`fit` returns them).
    extra: its non-trained state, with the same leading seed axis.
    dataset: the held-out :class:`~ultr_jax.data.RankingDataset`, with logged ``clicks``.
    batch_size: pages per evaluation chunk.

  Returns:
    A dict of ``float[S]`` arrays: ``click_ll`` and ``click_perplexity`` per seed.

  >>> import dataclasses
  >>> from ultr_jax import data
  >>> from ultr_jax.train import get_method
  >>> ds = data.make_synthetic(num_train=8, num_valid=1, num_test=1, list_size=4, num_features=3).train
  >>> ds = dataclasses.replace(ds, extras={"clicks": (ds.labels >= 2).astype(np.float32)})
  >>> m = get_method("two_tower", {"ranker": "linear"}, num_features=3, list_size=4)
  >>> params, extra = jax.vmap(lambda k: m.init(k, None))(jax.random.split(jax.random.key(0), 2))
  >>> params = jax.tree.map(jnp.zeros_like, params)  # logit 0 everywhere: a coin
  >>> out = evaluate_clicks(m, params, extra, ds)
  >>> print(np.round(out["click_perplexity"], 4), np.round(out["click_ll"], 4))
  [2. 2.] [-0.6931 -0.6931]
  """
  if method.click_logits is None:
    raise ValueError(f"method {method.name!r} is not a click model (it has no click_logits)")
  if "clicks" not in dataset.extras:
    raise ValueError("evaluate_clicks needs logged clicks: dataset.extras['clicks']")
  q = dataset.num_queries
  chunk = max(1, min(batch_size, q))
  sums = None
  for start in range(0, q, chunk):
    idx = np.arange(start, start + chunk)
    rows = np.minimum(idx, q - 1)
    batch = {k: v for k, v in dataset.as_batch(rows).items() if k != "qid"}
    batch["where"] = batch["where"] & (idx < q)[:, None]
    part = np.asarray(
      _click_chunk(params, extra, jax.tree.map(jnp.asarray, batch), logits_fn=method.click_logits), np.float64
    )
    sums = part if sums is None else sums + part
  assert sums is not None  # a dataset has at least one chunk
  count = dataset.where.sum(0).astype(np.float64)  # [L] shown documents per rank
  ranks = count > 0
  perplexity = np.exp(-sums[:, ranks] / count[ranks]).mean(-1)
  return {"click_ll": sums.sum(-1) / max(count.sum(), 1.0), "click_perplexity": perplexity}
