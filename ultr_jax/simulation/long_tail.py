r"""A long-tail session log, generated batch by batch: Zipf-distributed queries, many candidates, a noisy ranker.

Real search logs (Baidu-ULTR, Yandex) are long-tailed: a few queries are issued very often, most a few times,
the list a query is shown with differs from session to session, and the number of distinct (query, document)
pairs grows with the log. :func:`simulate_long_tail_log` draws such a log one batch at a time (nothing of
size ``num_sessions`` is ever held), so it can be written as session shards
(:func:`~ultr_jax.data.write_session_shards`) of any length.
"""

import functools
from typing import Iterator, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special

from ultr_jax.simulation.click_models import ClickModel, LogSampler, get_click_model

__all__ = ["simulate_long_tail_log", "long_tail_document_params"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
#: The hash streams of the documents' features (stream ``_FEATURE_STREAM + f`` for feature ``f``) and of the
#: attraction's noise around its features' logit: far past those of the Beta parameters (0, 1, ...).
_FEATURE_STREAM, _FEATURE_NOISE_STREAM = 1 << 20, (1 << 20) - 1


def _splitmix64(x: np.ndarray) -> np.ndarray:
  """The splitmix64 finaliser (a bijection of uint64 with good avalanche), elementwise."""
  with np.errstate(over="ignore"):
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _document_uniforms(seed: int, stream: int, doc_ids: np.ndarray) -> np.ndarray:
  """A uniform in (0, 1) per document id: a hash of (seed, stream, id), the same in every batch."""
  with np.errstate(over="ignore"):
    base = _splitmix64(np.asarray(np.uint64(seed) * _GOLDEN + np.uint64(stream + 1)))
    h = _splitmix64(np.asarray(doc_ids, np.uint64) * _GOLDEN ^ base)
  return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def long_tail_document_params(
  key: jax.Array,
  doc_ids: np.ndarray,
  *,
  attraction: tuple = (1.0, 3.0),
  document_params: Optional[Mapping[str, tuple]] = None,
  feature_weights: Optional[Sequence[float]] = None,
  feature_bias: float = -1.0,
  feature_noise: float = 0.0,
) -> dict:
  r"""The true per-document parameters of :func:`simulate_long_tail_log`'s documents ``doc_ids``.

  Each parameter is a Beta draw per document, :math:`\theta_d = F^{-1}_{\mathrm{Beta}(a, b)}(u_d)`, with
  :math:`u_d` a hash of (the key, the parameter, :math:`d`): the same document has the same value in every
  batch and process, and no table of all documents is held. With ``feature_weights`` :math:`w \in
  \mathbb{R}^F`, each document has features :math:`x_d \sim \mathcal{N}(0, I_F)` and its attraction follows
  from them,

  .. math::
      a_d = \sigma(b + w^\top x_d + s\, \epsilon_d), \qquad \epsilon_d \sim \mathcal{N}(0, 1),

  each coordinate of :math:`x_d` and :math:`\epsilon_d` a normal quantile of a hash of (the key, its own
  stream, :math:`d`), so a model of the features predicts a document it never saw up to the noise :math:`s`; the
  other parameters are the Beta draws they are without features.

  Args:
    key: the log's PRNG key.
    doc_ids: ``int[...]`` document ids.
    attraction: ``(a, b)`` of the attraction's Beta distribution (unused with ``feature_weights``).
    document_params: other per-document parameters, ``name -> (a, b)`` (e.g. the DBN's ``satisfaction``).
    feature_weights: :math:`w` (``F`` of them), or None: no features.
    feature_bias: :math:`b`.
    feature_noise: :math:`s \ge 0`, the spread of each document's attraction logit around its features'.

  Returns:
    dict of ``float32[...]`` arrays: ``attraction`` and each of ``document_params``; with ``feature_weights``
    also ``features`` ``float32[..., F]``.

  >>> p = long_tail_document_params(jax.random.key(0), np.array([0, 1, 0]))
  >>> p["attraction"].shape, bool(p["attraction"][0] == p["attraction"][2])
  ((3,), True)
  >>> f = long_tail_document_params(jax.random.key(0), np.array([0, 1]), feature_weights=[1.0, -1.0])
  >>> x = f["features"]
  >>> print(x.shape, np.allclose(f["attraction"], 1 / (1 + np.exp(1.0 - x[:, 0] + x[:, 1]))))
  (2, 2) True
  """
  seed = _seed(key)
  specs = {"attraction": attraction, **dict(document_params or {})}
  out = {}
  for stream, (name, (a, b)) in enumerate(specs.items()):
    if name == "attraction" and feature_weights is not None:
      continue  # from the features below
    u = _document_uniforms(seed, stream, doc_ids)
    out[name] = scipy.special.betaincinv(float(a), float(b), u).astype(np.float32)
  if feature_weights is not None:
    out.update(_feature_attraction(seed, doc_ids, feature_weights, feature_bias, feature_noise))
  return {k: out[k] for k in ("attraction", *(k for k in out if k != "attraction"))}


def _feature_attraction(seed: int, doc_ids: np.ndarray, weights, bias: float, noise: float) -> dict:
  r"""``features`` ``float32[..., F]`` and ``attraction`` :math:`\sigma(b + w^\top x + s \epsilon)` of ``doc_ids``."""
  w = np.asarray(weights, np.float64)
  if w.ndim != 1 or w.size < 1 or not noise >= 0:
    raise ValueError(f"feature_weights must be a non-empty list and feature_noise >= 0, got {weights!r}, {noise}")
  x = np.stack(
    [scipy.special.ndtri(_document_uniforms(seed, _FEATURE_STREAM + f, doc_ids)) for f in range(w.size)], axis=-1
  )
  logit = bias + x @ w
  if noise > 0:
    logit = logit + noise * scipy.special.ndtri(_document_uniforms(seed, _FEATURE_NOISE_STREAM, doc_ids))
  return {"features": x.astype(np.float32), "attraction": scipy.special.expit(logit).astype(np.float32)}


def _seed(key: jax.Array) -> int:
  """A 64-bit integer from a PRNG key's data (typed or raw keys)."""
  data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
  words = np.asarray(data, np.uint64).reshape(-1)
  with np.errstate(over="ignore"):
    return int(_splitmix64(np.bitwise_xor.reduce(words * (np.arange(len(words), dtype=np.uint64) + _GOLDEN))))


def _zipf_queries(rng: np.random.Generator, n: int, num_queries: int, exponent: float) -> np.ndarray:
  """``n`` draws of :math:`P(q) \\propto (q + 1)^{-s}` on ``0..num_queries-1`` (Zipf conditioned on the range)."""
  out = np.empty(n, np.int64)
  todo = np.arange(n)
  while todo.size:
    k = rng.zipf(exponent, size=todo.size)
    ok = k <= num_queries
    out[todo[ok]] = k[ok] - 1
    todo = todo[~ok]
  return out


def simulate_long_tail_log(
  key: jax.Array,
  model: "str | ClickModel",
  *,
  num_sessions: int,
  num_queries: int,
  num_candidates: int = 20,
  list_size: int = 10,
  batch_size: int = 100_000,
  zipf_exponent: float = 1.1,
  noise: float = 0.3,
  attraction: tuple = (1.0, 3.0),
  document_params: Optional[Mapping[str, tuple]] = None,
  first_batch: int = 0,
  feature_weights: Optional[Sequence[float]] = None,
  feature_bias: float = -1.0,
  feature_noise: float = 0.0,
  **model_params,
) -> Iterator[dict]:
  r"""A long-tail session log, yielded batch by batch (bounded memory for any ``num_sessions``).

  Each session draws a query from a Zipf law truncated to ``Q`` queries,

  .. math::  P(q) = \frac{(q + 1)^{-s}}{\sum_{j=1}^{Q} j^{-s}}, \qquad q = 0, \dots, Q - 1,

  (the long tail of real query logs: Zipf's law, G. K. Zipf, *Human Behavior and the Principle of Least
  Effort*, 1949), scores the
  query's ``C`` candidates :math:`d = qC + c` with a noisy logging ranker :math:`a_d + \sigma \epsilon`,
  :math:`\epsilon \sim \mathcal{N}(0, 1)`, shows the top ``L`` by that score (so lists differ from session to
  session and distinct (query, document) pairs keep growing with the log) and samples clicks from
  ``model``'s session sampler (as :func:`~ultr_jax.simulation.simulate_session_log`) with ``model_params``.
  The attraction :math:`a_d \sim \mathrm{Beta}` and any ``document_params`` are a hash of (key, document)
  (:func:`long_tail_document_params`), so no table of the ``Q C`` documents is held; with ``feature_weights``
  each document has features :math:`x_d` and :math:`a_d = \sigma(b + w^\top x_d + s\,\epsilon_d)` instead
  (the same function), and the batches carry the shown documents' features. Batch ``i`` is a
  function of ``(key, i)`` alone. A held-out log of the same documents takes the same ``key`` and batches
  numbered past the training log's (``first_batch``); another key draws other documents' parameters under the
  same ids, which no fit on the training log can predict.

  Args:
    key: PRNG key.
    model: a registered click model's name or instance (its :class:`~ultr_jax.simulation.LogSampler`, else its ``simulate``, draws the clicks).
    num_sessions: ``S`` in all.
    num_queries: ``Q``.
    num_candidates: ``C`` documents per query (``Q C < 2^31``).
    list_size: ``L <= C`` ranks shown.
    batch_size: sessions per yielded batch (the last may be smaller).
    zipf_exponent: :math:`s > 1`.
    noise: the logging ranker's :math:`\sigma`.
    attraction: ``(a, b)`` of the attraction's Beta distribution.
    document_params: other per-document sampler parameters, ``name -> (a, b)`` of their Beta distribution
      (e.g. ``{"satisfaction": (2, 2)}`` for the DBN).
    first_batch: the number of the first batch (``i`` above): a held-out log of the same documents starts past
      the training log's last batch.
    feature_weights, feature_bias, feature_noise: the attraction from features, as
      :func:`long_tail_document_params` (default None: no features, the Beta attraction).
    **model_params: scalar sampler parameters (e.g. ``perseverance=0.9``).

  Yields:
    dicts of ``doc_ids int32[B, L]`` (displayed order), ``clicks float32[B, L]``, ``where bool[B, L]`` (all
    True), ``queries int32[B]``, and the true model's ``click_prob`` and ``conditional_click_prob``
    (``float32[B, L]``), with ``feature_weights`` also ``features float32[B, L, F]``; ready for
    :func:`~ultr_jax.data.write_session_shards`.

  >>> batches = simulate_long_tail_log(jax.random.key(0), "pbm", num_sessions=5, num_queries=100,
  ...                                  num_candidates=6, list_size=4, batch_size=3)
  >>> [b["doc_ids"].shape for b in batches]
  [(3, 4), (2, 4)]
  """
  m = get_click_model(model)
  if num_queries < 1 or not 1 <= list_size <= num_candidates or batch_size < 1 or num_sessions < 0:
    raise ValueError(
      f"expected num_queries >= 1, 1 <= list_size <= num_candidates, batch_size >= 1 and num_sessions >= 0; got "
      f"{num_queries}, {list_size}, {num_candidates}, {batch_size}, {num_sessions}"
    )
  if num_queries * num_candidates >= 2**31:
    raise ValueError(f"num_queries * num_candidates = {num_queries * num_candidates} document ids exceed int32")
  if not zipf_exponent > 1:
    raise ValueError(f"zipf_exponent must be > 1, got {zipf_exponent}")
  if first_batch < 0:
    raise ValueError(f"first_batch must be >= 0, got {first_batch}")
  seed = _seed(key)
  feat = {} if feature_weights is None else {"feature_weights": feature_weights, "feature_bias": feature_bias}
  feat.update({"feature_noise": feature_noise} if feat else {})
  sampler = m.session_sampler if isinstance(m, LogSampler) else m.simulate
  sample = jax.jit(functools.partial(sampler, **model_params))  # scalars static, per-document traced
  for i, start in enumerate(range(0, num_sessions, batch_size), start=int(first_batch)):
    n = min(batch_size, num_sessions - start)
    rng = np.random.default_rng(np.random.SeedSequence([seed & 0xFFFFFFFF, seed >> 32, i]))
    queries = _zipf_queries(rng, n, num_queries, zipf_exponent)
    candidates = queries[:, None] * num_candidates + np.arange(num_candidates)
    params = long_tail_document_params(key, candidates, attraction=attraction, document_params=document_params, **feat)
    score = params["attraction"] + noise * rng.standard_normal(candidates.shape)
    top = np.argsort(-score, axis=1, kind="stable")[:, :list_size]
    features = params.pop("features", None)
    shown = {k: np.take_along_axis(v, top, axis=1) for k, v in params.items()}
    a = shown.pop("attraction")
    out = sample(jax.random.fold_in(key, i), a, **shown)
    extra = {} if features is None else {"features": np.take_along_axis(features, top[..., None], axis=1)}
    yield {
      "doc_ids": np.take_along_axis(candidates, top, axis=1).astype(np.int32),
      "clicks": np.asarray(out["clicks"], np.float32),
      "where": np.ones((n, list_size), bool),
      "queries": queries.astype(np.int32),
      "click_prob": np.asarray(out["click_prob"], np.float32),
      "conditional_click_prob": np.asarray(out["conditional_click_prob"], np.float32),
      **extra,
    }
