"""The generic training loop: jitted, vmapped over seeds, sharded over queries.

One loop trains every :class:`~ultr_jax.train.Method` (naive, IPS, DLA, LBD,
CLD, SIF ...):

* the training lists live on the device(s) once; each step gathers a
  fixed-shape batch of query indices inside the jitted step, so nothing is
  copied from the host per step and the step compiles exactly once;
* clicks are simulated inside the step by ``click_fn(key, batch)`` (fresh
  sessions every step, as in ULTRA's online simulation), or read from the
  dataset when ``click_fn`` is None (logged clicks);
* the users see each list in its stored order (``config.display =
  "logged"``, the logging policy's), or as the ranker being trained ranks it
  at that step (``"model"``: by score; ``"model_sample"``: a Plackett-Luce
  sample of the scores), ULTRA's deterministic and stochastic online
  simulation feeds, which put offline methods in the online setting of Ai et
  al. (TOIS 2021, "Unbiased Learning to Rank: Online or Offline?");
* independent seeds run in lockstep under ``jax.vmap`` (different
  initialisations, click draws and batch orders);
* the batch's query axis is sharded over a ``jax.sharding.Mesh`` (data
  parallel); parameters are replicated;
* the best state on the validation metric is kept per seed, with optional
  early stopping, and the whole state (every tower, the optimizer state,
  the step, the RNG and the best-so-far state) is checkpointed with orbax
  and resumed from the latest checkpoint, once its fingerprint (method and
  config, data, clicks, training config) matches the run's (:func:`run_fingerprint`);
* the loss and parameters are checked for finite values at every evaluation: a
  diverged run stops with an error, or (``on_divergence="mark"``) its seeds are
  marked ``diverged`` (:attr:`FitResult.diverged`).
"""

import functools
import hashlib
import json
import math
import os
import shutil
import sys
import time
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

from absl import flags as absl_flags
from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from ultr_jax import metrics as metrics_lib
from ultr_jax import simulation
from ultr_jax.data import RankingDataset
from ultr_jax.train import results as results_lib
from ultr_jax.train import sharding as sharding_lib
from ultr_jax.train.checkpoint import Checkpointer
from ultr_jax.train.config import merge_config
from ultr_jax.train.method import Method

__all__ = [
  "DISPLAYS",
  "default_train_config",
  "display_batch",
  "make_optimizer",
  "fit",
  "training_arrays",
  "evaluate",
  "evaluate_clicks",
  "predict",
  "FitResult",
  "DEFAULT_CUTOFFS",
  "run_fingerprint",
  "fingerprint_diff",
]

DEFAULT_CUTOFFS = (1, 3, 5, 10)
DISPLAYS = ("logged", "model", "model_sample")
ClickFn = Callable[[jax.Array, Mapping[str, jax.Array]], Mapping[str, jax.Array]]


def default_train_config() -> ml_collections.ConfigDict:
  """Defaults of :func:`fit`; override any field in the config you pass.

  >>> c = default_train_config()
  >>> c.steps, c.batch_size, c.optimizer, c.display
  (2000, 64, 'adam', 'logged')
  >>> c.steps = 100  # then fit(method, train, config=c)
  """
  c = ml_collections.ConfigDict()
  c.steps = 2000
  c.batch_size = 64
  c.optimizer = "adam"
  c.learning_rate = 1e-3
  c.grad_clip = 0.0  # global-norm clipping; 0 disables it.
  c.eval_every = 200
  c.patience = 0  # evaluations without improvement before stopping; 0 = never.
  c.select_metric = "ndcg@10"
  c.checkpoint_every = 0  # steps between checkpoints; 0 = at every evaluation.
  c.max_to_keep = 2
  c.eval_batch_size = 512
  c.num_devices = 0  # devices in the data-parallel mesh; 0 = all.
  c.data_seed = 0  # batch order (combined with each run's seed).
  # How the batches are drawn and the training lists laid out on N devices. The lists are sharded over the
  # devices' data axis (each device holds 1/N of them, in strata padded with fully masked lists).
  # 0: one permutation of all queries per epoch (the historical sampler: the same batches on any number of
  #    devices and processes); on N > 1 devices each device gathers the batch's rows it holds and an exact
  #    reduce-scatter hands each device its block of the batch (one [B, L, F] exchange per step).
  # K > 0 (a multiple of N): K contiguous strata, B / K queries from each per step (B rounded up to a
  #    multiple of K), each stratum a permutation per epoch; every device gathers its block of the batch from
  #    the strata it holds, without communication. The batches depend on K, not on N.
  c.data_shards = 0
  # Several processes (jax.distributed): True, each passes fit only its own queries
  # (sharding.process_query_range); False, each passes the whole set and fit keeps its own queries of it.
  c.local_data = False
  # Streamed training (fit on an iterator of batches): chunks of steps_per_call batches put on the
  # devices ahead of the compute (jax.device_put is asynchronous).
  c.prefetch = 2
  c.progress = True
  c.progress_every = 0  # also print a progress line every this many steps (0: at evaluations only).
  # Train steps per jitted call (a lax.scan over the steps; 1 = one call per step). The count used is
  # the largest divisor of gcd(eval_every, checkpoint_every, progress_every) up to this, so every
  # evaluation, checkpoint and progress line falls where it would with one call per step; the
  # steps are the same. Fewer calls mean less dispatch and, on CPU, XLA allocates the step's
  # temporaries once per call rather than once per step.
  c.steps_per_call = 100
  # The order the simulated users see each training list in (with a click_fn): "logged" (as stored, the
  # logging policy's), "model" (the current ranker's, by score) or "model_sample" (a Plackett-Luce sample
  # of its scores): ULTRA's deterministic and stochastic online feeds.
  c.display = "logged"
  # Delete this run's checkpoints (workdir/checkpoints/<name>) and start over, instead of resuming; a
  # checkpoint of a different configuration is refused otherwise.
  c.restart = False
  # A non-finite loss or parameters at an evaluation: "raise" stops with an error; "mark" keeps going and
  # marks the seeds diverged (FitResult.diverged, the history's "diverged", results.json's "_diverged").
  c.on_divergence = "raise"
  return c


ON_DIVERGENCE = ("raise", "mark")
# Fields that do not change what a run computes (output, speed, bookkeeping): left out of the fingerprint.
# ``steps`` is left out too, so a finished run can be extended; a checkpoint past ``steps`` is refused.
_NOT_FINGERPRINTED = (
  "steps",
  "progress",
  "progress_every",
  "steps_per_call",
  "checkpoint_every",
  "max_to_keep",
  "eval_batch_size",
  "num_devices",
  "restart",
  "on_divergence",
  "prefetch",
  "local_data",
)


def _with_defaults(config: Optional[ml_collections.ConfigDict]) -> ml_collections.ConfigDict:
  return merge_config(default_train_config(), config, what="train config (fit)")


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """The optax optimizer named by ``config.optimizer`` (adam, adagrad, sgd, adamw).

  >>> tx = make_optimizer(default_train_config())
  >>> isinstance(tx, optax.GradientTransformation)
  True
  """
  builders = {"adam": optax.adam, "adagrad": optax.adagrad, "sgd": optax.sgd, "adamw": optax.adamw}
  if config.optimizer not in builders:
    raise ValueError(f"unknown optimizer {config.optimizer!r}; one of {sorted(builders)}")
  tx = builders[config.optimizer](config.learning_rate)
  if config.get("grad_clip", 0.0):
    tx = optax.chain(optax.clip_by_global_norm(config.grad_clip), tx)
  return tx


class FitResult(NamedTuple):
  """What :func:`fit` returns. Arrays have a leading seed axis ``[S, ...]``."""

  params: Any  # best-on-validation params per seed (final params without validation)
  extra: Any  # the matching non-trained method state
  history: list  # one dict per evaluation
  best_step: np.ndarray  # int [S]
  best_metric: np.ndarray  # float [S] (validation select_metric)
  final_params: Any  # params at the last step
  diverged: Optional[np.ndarray] = None  # bool [S]: the seed's loss or parameters went non-finite
  fingerprint: Optional[dict] = None  # what shaped the run (run_fingerprint), with a workdir


# ----------------------------------------------------------------------------
# Device-resident data and batch gathering.


def display_batch(
  batch: Mapping[str, jax.Array], scores: jax.Array, *, mode: str = "model", key: Optional[jax.Array] = None
) -> dict[str, jax.Array]:
  r"""The batch with each list reordered as a ranker with ``scores`` displays it.

  ``mode="model"`` sorts each list by ``scores`` (descending; ties keep the stored order);
  ``"model_sample"`` draws the order from the Plackett-Luce model
  :math:`P(\pi) = \prod_t e^{s_{\pi_t}} / \sum_{u \ge t} e^{s_{\pi_u}}`
  (:func:`~ultr_jax.simulation.plackett_luce_sample`, with ``key``). Masked items go last. Every
  per-item array (leading dims ``where.shape``: features, labels, extras) moves with its item, so a
  click model applied to the result sees position ``i`` at index ``i``; a ``positions`` entry
  becomes ``0..L-1``.

  Args:
    batch: ``where`` ``[..., L]`` and per-item arrays ``[..., L, ...]`` (others pass through).
    scores: ``[..., L]`` the displaying ranker's scores (gradients are stopped).
    mode: ``"model"`` or ``"model_sample"``.
    key: PRNG key, for ``"model_sample"``.

  >>> b = {"labels": jnp.array([0.0, 1.0, 2.0]), "where": jnp.array([True, True, False])}
  >>> display_batch(b, jnp.array([0.5, 2.0, 9.0]))["labels"].tolist()
  [1.0, 0.0, 2.0]
  """
  where = batch["where"]
  scores = jax.lax.stop_gradient(scores)
  if mode == "model":
    order = jnp.argsort(-jnp.where(where, scores, -jnp.inf), axis=-1, stable=True)
  elif mode == "model_sample":
    if key is None:
      raise ValueError("display_batch: mode='model_sample' needs a key")
    order = jnp.argsort(simulation.plackett_luce_sample(key, scores, where=where), axis=-1)
  else:
    raise ValueError(f"display_batch: unknown mode {mode!r}; expected 'model' or 'model_sample'")
  item_dims = where.ndim

  def move(v):
    if v.ndim < item_dims or v.shape[:item_dims] != where.shape:
      return v
    return jnp.take_along_axis(v, order.reshape(order.shape + (1,) * (v.ndim - item_dims)), axis=item_dims - 1)

  out = {k: move(v) for k, v in batch.items()}
  if "positions" in out:
    out["positions"] = jnp.broadcast_to(jnp.arange(where.shape[-1], dtype=out["positions"].dtype), where.shape)
  return out


def _device_arrays(ds: RankingDataset, sharding) -> dict[str, jax.Array]:
  arrays = {}
  for k, v in ds.as_batch().items():
    v = np.asarray(v)
    if v.dtype == np.float64:
      v = v.astype(np.float32)
    elif v.dtype == np.int64:
      v = v.astype(np.int32)
    arrays[k] = jax.device_put(v, sharding)
  return arrays


def _place_train(ds: RankingDataset, mesh, config) -> tuple[dict, Optional[np.ndarray], int]:
  """``(arrays, stratum bounds or None, K)``: the training lists on the devices as :func:`fit` holds them."""
  multiprocess = jax.process_count() > 1
  num_strata = int(config.data_shards) or (1 if mesh.size == 1 and not multiprocess else mesh.size)
  if num_strata == 1 and not multiprocess and not config.data_shards:
    # One device, default config: the whole set as one unpadded array, one permutation per epoch.
    return _device_arrays(ds, sharding_lib.replicated(mesh)), None, 1
  num_queries = ds.num_queries
  if multiprocess and config.local_data:
    from jax.experimental import multihost_utils  # noqa: PLC0415

    num_queries = int(np.sum(multihost_utils.process_allgather(np.asarray([ds.num_queries]))))
  elif multiprocess:
    lo, hi = sharding_lib.process_query_range(num_queries, num_strata)
    ds = ds.subset(np.arange(lo, hi))
  data, bounds = sharding_lib.shard_query_arrays(ds.as_batch(), mesh, num_strata, num_queries)
  return data, bounds, num_strata


def _query_rows(bounds: np.ndarray) -> np.ndarray:
  """``int32[Q]``: the row of each query in the stratified, padded layout (``bounds`` of its ``K`` strata)."""
  m = max(1, int(np.max(np.diff(bounds))))
  q = np.arange(bounds[-1])
  k = np.searchsorted(bounds, q, side="right") - 1
  return (k * m + q - bounds[k]).astype(np.int32)


def _exact_sum_scatter(x: jax.Array, axis_name: str) -> jax.Array:
  """``psum_scatter`` over ``axis_name`` (tiled on axis 1) of arrays where at most one device holds a nonzero
  value per entry: summed as unsigned integers of the same width, so every value (``-0.0``, NaN) passes exactly."""
  dtype = x.dtype
  if dtype == jnp.bool_:
    return jax.lax.psum_scatter(x.astype(jnp.uint8), axis_name, scatter_dimension=1, tiled=True).astype(bool)
  as_int = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[dtype.itemsize]
  y = jax.lax.bitcast_convert_type(x, as_int) if dtype != as_int else x
  y = jax.lax.psum_scatter(y, axis_name, scatter_dimension=1, tiled=True)
  return jax.lax.bitcast_convert_type(y, dtype) if dtype != as_int else y


def training_arrays(train: RankingDataset, config: Optional[ml_collections.ConfigDict] = None) -> dict[str, jax.Array]:
  r"""The training lists on the devices as :func:`fit` holds them under ``config``.

  On one device with the default config, one array per field; otherwise the queries in ``config.data_shards``
  strata (``K``; 0: one per device), each padded to :math:`\lceil Q/K \rceil` rows with fully masked lists,
  sharded over the devices' data axis, so each of the ``N`` devices holds ``K / N`` strata
  (``sharding.shard_query_arrays``). In a multi-process run ``train`` is this process's
  queries (``sharding.process_query_range``).

  >>> from ultr_jax import data
  >>> train = data.make_synthetic(num_train=10, num_valid=1, num_test=1, list_size=4, num_features=3).train
  >>> a = training_arrays(train, {"num_devices": 1, "data_shards": 4})
  >>> a["where"].shape, a["where"].any(-1).sum().item()  # 4 strata of ceil(10 / 4) = 3 rows, 10 of them real
  ((12, 4), 10)
  """
  config = _with_defaults(config)
  mesh = sharding_lib.make_mesh(config.num_devices or None)
  return _place_train(train, mesh, config)[0]


def _gather(data: Mapping[str, jax.Array], idx: jax.Array) -> dict[str, jax.Array]:
  """Rows ``idx`` of every array (plain indexing); ``idx < 0`` yields an all-masked query."""
  safe = jnp.maximum(idx, 0)
  batch = {k: v[safe] for k, v in data.items()}
  batch["where"] = batch["where"] & (idx >= 0)[..., None]
  return batch


def _progress(message: str) -> None:
  """A progress line: ``absl.logging.info`` under an absl app (its handler prints INFO on stderr);
  elsewhere (a notebook, a test) absl hides INFO, so the line goes to stderr directly."""
  if absl_flags.FLAGS.is_parsed():
    logging.info("%s", message)
  else:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


# ----------------------------------------------------------------------------
# Fingerprints: what shapes a run, so that a checkpoint of another run is never resumed.


def _canonical(value: Any) -> Any:
  """``value`` as plain JSON types (tuples as lists, NumPy scalars as numbers), for comparison."""
  return json.loads(json.dumps(results_lib._jsonable(value), sort_keys=True, default=str))


def _digest(*parts: Any) -> str:
  h = hashlib.sha256()
  for part in parts:
    if isinstance(part, np.ndarray):
      h.update(str((part.shape, part.dtype.str)).encode())
      h.update(np.ascontiguousarray(part).tobytes())
    else:
      h.update(json.dumps(part, sort_keys=True, default=str).encode())
  return h.hexdigest()[:16]


def _dataset_digest(ds: Optional[RankingDataset]) -> Optional[dict]:
  """Shapes of ``ds``'s arrays and a cheap content digest: up to 64 evenly spaced queries and each array's sum."""
  if ds is None:
    return None
  arrays = {k: np.asarray(v) for k, v in ds.as_batch().items()}
  rows = np.unique(np.linspace(0, max(ds.num_queries - 1, 0), num=min(64, ds.num_queries)).astype(np.int64))
  parts = []
  for k in sorted(arrays):
    v = arrays[k]
    total = float(np.sum(v, dtype=np.float64)) if v.dtype.kind in "biuf" else 0.0
    parts += [k, np.ascontiguousarray(v[rows]) if v.ndim else v, round(total, 4)]
  return {"shapes": {k: list(v.shape) for k, v in sorted(arrays.items())}, "digest": _digest(*parts)}


def _click_digest(click_fn: Optional[ClickFn], batch: Mapping[str, jax.Array]) -> Optional[str]:
  """A digest of what ``click_fn`` makes of ``batch`` under a fixed key (its outputs rounded to 5 decimals),
  so that another click model, or other parameters of it, give another digest."""
  if click_fn is None:
    return None
  out = jax.device_get(click_fn(jax.random.key(0), batch))
  return _digest(*(x for k in sorted(out) for x in (k, np.round(np.asarray(out[k], np.float64), 5))))


def _across_processes(part: Any) -> Any:
  """``part`` on one process; in a multi-process run, where each process digests its own share of the data
  (``config.local_data``, a stream per process), the digest of every process's ``part`` in process order, the
  same on all of them (an all-gather), so that every process accepts or refuses a checkpoint alike."""
  if jax.process_count() == 1 or part is None:
    return part
  from jax.experimental import multihost_utils  # noqa: PLC0415

  mine = np.frombuffer(_digest(part).encode("ascii"), np.uint8)
  every = np.asarray(multihost_utils.process_allgather(mine))
  return {"processes": int(jax.process_count()), "digest": _digest(every)}


def run_fingerprint(
  method: Method,
  train: RankingDataset,
  valid: Optional[RankingDataset] = None,
  *,
  click_fn: Optional[ClickFn] = None,
  config: Optional[ml_collections.ConfigDict] = None,
  seeds: Sequence[int] = (0,),
) -> dict:
  """What shapes a :func:`fit` run: the method (name, full config, initial state's shapes), the data, the clicks
  and the training config; a checkpoint records it, and one whose fingerprint differs is not resumed.

  ``hash`` digests the rest. Fields of the training config that do not change what is computed
  (``progress``, ``eval_batch_size``, ``steps``, ...) are left out, so a finished run can be extended.

  >>> from ultr_jax import data
  >>> from ultr_jax.train import get_method
  >>> splits = data.make_synthetic(num_train=8, num_valid=2, num_test=2, list_size=4, num_features=3)
  >>> m = get_method("naive", {"ranker": "linear"}, num_features=3, list_size=4)
  >>> a = run_fingerprint(m, splits.train)
  >>> b = run_fingerprint(m, splits.train, config={"learning_rate": 0.5})
  >>> fingerprint_diff(a, b)
  ['train_config.learning_rate']
  """
  config = _with_defaults(config)
  batch = {k: jnp.asarray(v) for k, v in train.as_batch(np.arange(min(8, train.num_queries))).items() if k != "qid"}
  return _fingerprint(method, batch, _dataset_digest(train), valid, click_fn, config, seeds)


def _fingerprint(method, batch, train_digest, valid, click_fn, config, seeds) -> dict:
  key = jax.random.key(0)
  shapes = jax.eval_shape(lambda k, b: method.init(k, b), key, batch)
  leaves = jax.tree_util.tree_leaves_with_path(shapes)
  fp = {
    "method": method.name,
    "method_config": _canonical(method.config) if method.config is not None else None,
    "method_state": _digest([(jax.tree_util.keystr(p), list(x.shape), str(x.dtype)) for p, x in leaves]),
    # data_shards=0 (the default) is left out, so fingerprints made before the key existed still match.
    "train_config": _canonical(
      {k: v for k, v in config.items() if k not in _NOT_FINGERPRINTED and not (k == "data_shards" and not v)}
    ),
    "seeds": [int(s) for s in seeds],
    "train_data": _across_processes(train_digest),
    "valid_data": _dataset_digest(valid),
    "clicks": _across_processes(_click_digest(click_fn, batch)),
  }
  fp["hash"] = _digest(fp)
  return fp


def fingerprint_diff(old: Optional[Mapping[str, Any]], new: Mapping[str, Any]) -> list[str]:
  """The keys (``a.b`` for nested ones) where two fingerprints differ; ``hash`` is not compared.

  >>> fingerprint_diff({"method": "ips", "train_config": {"lr": 1}}, {"method": "ips", "train_config": {"lr": 2}})
  ['train_config.lr']
  """
  if old is None:
    return ["<no fingerprint in the checkpoint>"]
  out = []
  for k in sorted(set(old) | set(new)):
    if k == "hash":
      continue
    a, b = old.get(k), new.get(k)
    if isinstance(a, Mapping) and isinstance(b, Mapping) and k != "train_data" and k != "valid_data":
      out += [f"{k}.{kk}" for kk in sorted(set(a) | set(b)) if a.get(kk) != b.get(kk)]
    elif a != b:
      out.append(k)
  return out


def _epoch_draw(num_queries: int, per_step: int, step: int, rng_prefix: Sequence[int]) -> np.ndarray:
  """The ``per_step`` query indices of ``step`` when each epoch is a fresh permutation of ``num_queries``."""
  chunks, pos, got = [], step * per_step, 0
  while got < per_step:
    epoch, offset = divmod(pos, num_queries)
    perm = np.random.default_rng([*rng_prefix, epoch]).permutation(num_queries)
    take = perm[offset : offset + per_step - got]
    chunks.append(take)
    pos += len(take)
    got += len(take)
  return np.concatenate(chunks)


def _batch_indices(num_queries: int, batch_size: int, step: int, seeds: Sequence[int], data_seed: int) -> np.ndarray:
  """``int32[S, B]`` query indices of ``step``: a fresh permutation per epoch.

  Deterministic in ``(data_seed, seed, step)``, so a resumed run sees the
  same batches as an uninterrupted one. With fewer queries than the batch
  size, the batch is padded with ``-1`` (all-masked queries).
  """
  out = np.full((len(seeds), batch_size), -1, np.int32)
  per_step = min(batch_size, num_queries)
  for s, seed in enumerate(seeds):
    out[s, :per_step] = _epoch_draw(num_queries, per_step, step, [data_seed, int(seed)])
  return out


def _stratified_indices(
  bounds: np.ndarray, batch_size: int, step: int, seeds: Sequence[int], data_seed: int
) -> np.ndarray:
  """``int32[S, B]`` rows of the stratified, padded layout (``sharding.shard_query_arrays``)
  for ``step``: ``B / K`` queries from each of the ``K`` strata, each stratum a fresh permutation per epoch
  (seeded by ``(data_seed, seed, k, epoch)``). Batch slot block ``k`` comes from stratum ``k``, so the block of
  the batch a device trains on lies in the strata it holds; ``-1`` pads a stratum smaller than ``B / K``.
  Independent of the number of devices."""
  k_strata = len(bounds) - 1
  per = batch_size // k_strata
  sizes = np.diff(bounds)
  m = max(1, int(sizes.max()))
  out = np.full((len(seeds), k_strata, per), -1, np.int32)
  for s, seed in enumerate(seeds):
    for k in range(k_strata):
      n = int(min(per, sizes[k]))
      if n:
        out[s, k, :n] = k * m + _epoch_draw(int(sizes[k]), n, step, [data_seed, int(seed), 1_000_003 + k])
  return out.reshape(len(seeds), k_strata * per)


def _host(tree):
  """``tree`` on the host as NumPy; a replicated array spanning several processes is read from a local copy."""

  def get(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      x = x.addressable_data(0)
    return np.asarray(jax.device_get(x))

  return jax.tree.map(get, tree)


def _local(tree):
  """Replicated global arrays as this process's single-device copies (for host-side evaluation)."""
  return jax.tree.map(
    lambda x: x.addressable_data(0) if isinstance(x, jax.Array) and not x.is_fully_addressable else x, tree
  )


# ----------------------------------------------------------------------------
# Evaluation.


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
  labels_all, where_all = dataset.labels, dataset.where
  has_rel = ((labels_all > 0) & where_all).any(-1)
  counted_all = where_all.any(-1) & (has_rel if drop_no_relevant else True)
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
  count = dataset.where.sum(0).astype(np.float64)  # [L] shown documents per rank
  ranks = count > 0
  perplexity = np.exp(-sums[:, ranks] / count[ranks]).mean(-1)
  return {"click_ll": sums.sum(-1) / max(count.sum(), 1.0), "click_perplexity": perplexity}


# ----------------------------------------------------------------------------
# Training.


@jax.jit
def _finite_params(params):
  """``bool[S]``: every float leaf of the seed's params is finite (leaves carry a leading seed axis)."""
  oks = [
    jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1)
    for x in jax.tree.leaves(params)
    if jnp.issubdtype(x.dtype, jnp.inexact) and x.ndim > 0
  ]
  return functools.reduce(jnp.logical_and, oks) if oks else jnp.ones((), bool)


def _tree_where(cond, new, old):
  """Per-seed select: ``cond`` is ``bool[S]``; leaves have a leading seed axis."""

  def sel(n, o):
    c = cond.reshape(cond.shape + (1,) * (n.ndim - 1))
    return jnp.where(c, n, o)

  return jax.tree.map(sel, new, old)


def _aligned_empty(shape: tuple, dtype, align: int = 64) -> np.ndarray:
  """An uninitialised host array whose data starts on an ``align``-byte boundary.

  XLA's CPU client aliases such an array in ``jax.device_put`` instead of copying it (a 280 MB chunk: 0.1 s
  copied, 0.1 ms aliased: benchmarks/RESULTS.md, "`fit` on a stream, after removing host work"); elsewhere the
  alignment is harmless.
  """
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  raw = np.empty(nbytes + align, np.uint8)
  start = -raw.ctypes.data % align
  return raw[start : start + nbytes].view(dtype).reshape(shape)


def _narrow(dtype: np.dtype) -> np.dtype:
  """The dtype a host array takes on the devices without x64: float64 -> float32, int64 -> int32."""
  if dtype == np.float64:
    return np.dtype(np.float32)
  if dtype == np.int64:
    return np.dtype(np.int32)
  return dtype


class _StreamReader:
  """Reads a stream of batches for :func:`fit`: copies ``steps_per_call`` batches into a chunk, puts it on the
  devices (sharded over the batch axis; ``jax.device_put`` is asynchronous) up to ``prefetch`` chunks ahead,
  and tracks the stream's position (``get_state()``) after the last batch trained on, for checkpoints.

  The chunks' host buffers are allocated once and reused: a buffer goes back to the pool when the call that
  trained on it has finished (its outputs are ready), so no step pays for fresh memory (on this project's
  CPU VM, filling 280 MB of fresh pages took 0.6 s, refilling a used buffer 0.02 s). The batches are cast
  (float64 -> float32, int64 -> int32) while they are copied in, not before.
  """

  def __init__(self, source, mesh):
    self.it = iter(source)
    self.stateful = next(
      (
        o
        for o in (source, self.it)
        if callable(getattr(o, "get_state", None)) and callable(getattr(o, "set_state", None))
      ),
      None,
    )
    self.mesh = mesh
    self.sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, sharding_lib.DATA_AXIS))
    self.pending: list = []
    self.consumed_state = self._state()
    self.queue: list = []
    self.last = None
    self.spec = None  # {name: (shape, dtype)} of a batch, from the first one
    self.pulled = 0
    self.free: list = []  # host buffers {name: [K, B, ...]} no computation reads any more
    self.busy: list = []  # (buffer, outputs of the call that reads it)
    self.handed = None  # the buffer of the chunk next_chunk handed out last
    self.num_buffers = 0

  def _state(self):
    return _canonical(self.stateful.get_state()) if self.stateful is not None else None

  def _pull(self):
    if self.pending:
      return self.pending.pop(0)
    try:
      b = next(self.it)
    except StopIteration:
      return None
    b = {k: np.asarray(v) for k, v in b.items()}
    spec = {k: (v.shape, _narrow(v.dtype)) for k, v in b.items()}
    if self.spec is None:
      if b["where"].shape[0] * jax.process_count() % self.mesh.size:
        raise ValueError(
          f"a streamed batch of {b['where'].shape[0]} lists does not split over {self.mesh.size} devices"
        )
      self.spec = spec
    elif spec != self.spec:
      differ = sorted(k for k in set(spec) | set(self.spec) if spec.get(k) != self.spec.get(k))
      show = lambda sp: {k: f"{sp[k][1].name}{list(sp[k][0])}" if k in sp else None for k in differ}  # noqa: E731
      raise ValueError(
        f"fit: streamed batch {self.pulled} differs from the first in {differ}: {show(spec)}, where the first "
        f"has {show(self.spec)} (every batch must have the same keys, shapes and dtypes)"
      )
    self.pulled += 1
    return b, self._state()

  def peek(self) -> dict:
    item = self._pull()
    if item is None:
      raise ValueError("fit: the training stream is empty")
    self.pending.insert(0, item)
    return item[0]

  def _device(self, host: dict) -> dict:
    out = {}
    for k, v in host.items():
      if jax.process_count() > 1:
        shape = (v.shape[0], v.shape[1] * jax.process_count()) + v.shape[2:]
        out[k] = jax.make_array_from_process_local_data(self.sharding, v, shape)
      else:
        out[k] = jax.device_put(v, self.sharding)
    return out

  def put_one(self, batch: dict) -> dict:
    """``{name: [1, B, ...]}`` on the devices (a fresh buffer: for the initial state)."""
    return self._device({k: np.asarray(v, self.spec[k][1])[None] for k, v in batch.items()})

  def _buffer(self) -> dict:
    """A host buffer for a chunk: a released one, a new one, or (at the limit) the oldest once it is released."""
    done = [i for i, (_, outputs) in enumerate(self.busy) if all(x.is_ready() for x in jax.tree.leaves(outputs))]
    for i in reversed(done):
      self.free.append(self.busy.pop(i)[0])
    if self.free:
      return self.free.pop()
    if self.busy and self.num_buffers >= self.prefetch + 2:
      buf, outputs = self.busy.pop(0)
      jax.block_until_ready(outputs)
      return buf
    self.num_buffers += 1
    return {k: _aligned_empty((self.per_call,) + shape, dtype) for k, (shape, dtype) in self.spec.items()}

  def resume(self, step: int, saved_state) -> None:
    """Positions the stream after ``step`` batches: ``set_state(saved_state)``, or skipping ``step`` batches."""
    if self.stateful is not None and saved_state is not None:
      self.pending = []
      self.stateful.set_state(saved_state)
      self.consumed_state = saved_state
      return
    for _ in range(step):
      if self._pull() is None:
        break
    self.consumed_state = self._state()

  def start(self, step: int, total: int, per_call: int, prefetch: int) -> None:
    self.plan, self.total, self.per_call, self.prefetch, self.ended = step, total, per_call, prefetch, False
    self.refill()

  def refill(self, after=None) -> None:
    """Reads chunks up to ``prefetch`` ahead; ``after``: the outputs of the call given the last chunk handed out
    (its buffer is reused once they are ready)."""
    if after is not None and self.handed is not None:
      self.busy.append((self.handed, after))
      self.handed = None
    while len(self.queue) < self.prefetch and self.plan < self.total and not self.ended:
      n = min(self.per_call - self.plan % self.per_call, self.total - self.plan)
      buf, got, state = None, 0, None
      while got < n:
        item = self._pull()
        if item is None:
          self.ended = True
          break
        if buf is None:
          buf = self._buffer()
        for k, v in item[0].items():
          buf[k][got] = v
        got, state = got + 1, item[1]
      if not got:
        if buf is not None:
          self.free.append(buf)
        break
      for k in buf:  # the rest of the chunk repeats the last batch (those steps are not live)
        buf[k][got:] = buf[k][got - 1]
      self.queue.append((self._device(buf), got, state, buf))
      self.plan += got

  def next_chunk(self):
    """``(chunk, batches in it)``; ``(the last chunk, 0)`` once the stream has ended."""
    if not self.queue:
      self.refill()
    if not self.queue:
      return self.last, 0
    chunk, n, state, self.handed = self.queue.pop(0)
    self.last, self.consumed_state = chunk, state
    return chunk, n

  def close(self) -> None:
    self.queue, self.free, self.busy, self.handed = [], [], [], None


def fit(
  method: Method,
  train: RankingDataset,
  valid: Optional[RankingDataset] = None,
  *,
  click_fn: Optional[ClickFn] = None,
  config: Optional[ml_collections.ConfigDict] = None,
  seeds: Sequence[int] = (0,),
  workdir: Optional[str] = None,
  name: Optional[str] = None,
  on_eval: Optional[Callable[[dict], None]] = None,
) -> FitResult:
  """Trains ``method`` on ``train`` for ``len(seeds)`` independent runs at once.

  The training lists are sharded over the devices (each holds 1/N of them) and the batches drawn as
  ``config.data_shards`` says; N devices, or several processes, train as one (see
  :func:`~ultr_jax.train.maybe_initialize_distributed`).

  Args:
    method: the method to train.
    train: training lists (their extras travel into every batch); in a multi-process run, this process's
      queries (``sharding.process_query_range``). Or a stream: an iterable of batches,
      dicts of NumPy arrays ``[B, L]`` / ``[B, L, F]`` in the library's layout (``where``, ``features``,
      ``clicks``, ...; the same keys and shapes every time), one per step, the same for every seed
      (``config.batch_size`` and ``data_shards`` do not apply; with several processes, each yields its part of
      the batch). ``steps_per_call`` batches are stacked and put on the devices (sharded over the batch
      axis) ``config.prefetch`` chunks ahead of the compute. If the stream (or its iterator) has
      ``get_state()`` / ``set_state(state)`` (JSON-able states, e.g. a Grain iterator), its position after
      the last batch trained on is saved in each checkpoint and restored on resume; otherwise a resumed run
      skips as many batches as it has trained on. Training stops early where the stream ends.
    valid: validation lists for model selection; None keeps the final state.
    click_fn: ``click_fn(key, batch) -> dict`` merged into the batch inside
      the jitted step (fresh clicks every step); None when ``train`` already
      carries logged ``clicks``.
    config: see :func:`default_train_config`.
    seeds: one run per seed (vmapped): initialisation, clicks, batch order.
    workdir: if given, checkpoints go to ``workdir/checkpoints/<name>`` and
      training resumes from the latest one found there, if it was written by
      the same run (its :func:`run_fingerprint` matches; else ``ValueError``
      naming what differs, unless ``config.restart`` deletes it).
    name: the run's name (default ``method.name``) for progress and paths.
    on_eval: called on the host with every evaluation's record as it is made
      (the dict appended to :attr:`FitResult.history`: ``step``, ``train/<metric>``
      and ``valid/<metric>`` per seed), e.g. to send it to TensorBoard or
      wandb, or to append it to a JSON-lines file; records restored from a
      checkpoint are not replayed.

  Returns:
    A :class:`FitResult`.

  Raises:
    ValueError: an unknown config key; a checkpoint of another run in ``workdir``.
    FloatingPointError: the loss or parameters went non-finite (``config.on_divergence="raise"``).

  Logged clicks (here the labels >= 2 as perfect clicks), two seeds at once:

  >>> import dataclasses
  >>> from ultr_jax import data
  >>> from ultr_jax.train import get_method
  >>> splits = data.make_synthetic(num_train=32, num_valid=8, num_test=8, list_size=5, num_features=4)
  >>> train = dataclasses.replace(splits.train, extras={"clicks": (splits.train.labels >= 2).astype(np.float32)})
  >>> config = default_train_config()
  >>> config.steps, config.batch_size, config.eval_every, config.progress = 4, 8, 2, False
  >>> m = get_method("naive", {"ranker": "linear"}, num_features=4, list_size=5)
  >>> seen = []  # on_eval: each evaluation's record as it is made (to a logger, a file, ...)
  >>> result = fit(m, train, splits.valid, config=config, seeds=(0, 1), on_eval=seen.append)
  >>> result.best_step.shape, [h["step"] for h in result.history], seen == result.history
  ((2,), [2, 4], True)
  """
  config = _with_defaults(config)
  name = name or method.name
  if config.on_divergence not in ON_DIVERGENCE:
    raise ValueError(f"config.on_divergence: unknown {config.on_divergence!r}; expected one of {ON_DIVERGENCE}")
  display = str(config.display)
  if display not in DISPLAYS:
    raise ValueError(f"config.display: unknown {display!r}; expected one of {DISPLAYS}")
  if display != "logged" and click_fn is None:
    raise ValueError(
      f"config.display={display!r} shows the lists as the ranker being trained orders them, so "
      "the clicks must be simulated on that order: it needs a click_fn (logged clicks were made "
      "on the logged order)"
    )
  seeds = [int(s) for s in seeds]
  num_seeds = len(seeds)
  mesh = sharding_lib.make_mesh(config.num_devices or None)
  rep = sharding_lib.replicated(mesh)
  batch_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, sharding_lib.DATA_AXIS))
  tx = method.optimizer if method.optimizer is not None else make_optimizer(config)
  cutoffs = tuple(sorted(set(DEFAULT_CUTOFFS) | {10}))
  select = config.select_metric
  streaming = not isinstance(train, RankingDataset)
  data, bounds, stream = None, None, None
  if streaming:
    stream = _StreamReader(train, mesh)
    first = stream.peek()
    batch_size = int(first["where"].shape[0]) * jax.process_count()
    train_digest = {"stream": type(train).__name__, "batch_shapes": {k: list(v.shape) for k, v in first.items()}}
    fp_batch = {k: jnp.asarray(v) for k, v in first.items() if k != "qid"}
  else:
    data, bounds, num_strata = _place_train(train, mesh, config)
    batch_size = sharding_lib.round_up(int(config.batch_size), mesh.size if bounds is None else num_strata)
    train_digest = _dataset_digest(train)
    fp_batch = None

  # data_shards=0: one permutation of all queries per epoch (on sharded data, mapped to the padded rows);
  # data_shards=K: B / K queries from each stratum, so each device's block of the batch is on that device.
  stratified = bool(config.data_shards) and not streaming
  rows_of = None if bounds is None or stratified else _query_rows(bounds)

  def batch_indices(step):
    if stratified:
      return _stratified_indices(bounds, batch_size, step, seeds, config.data_seed)
    if bounds is None:
      return _batch_indices(train.num_queries, batch_size, step, seeds, config.data_seed)
    idx = _batch_indices(int(bounds[-1]), batch_size, step, seeds, config.data_seed)
    return np.where(idx >= 0, rows_of[np.maximum(idx, 0)], -1).astype(np.int32)

  def gather(data, idx):
    """``[S, B, ...]`` sharded over the batch axis. Stratified: each device gathers its block of the batch
    from the strata it holds. Otherwise (rows anywhere): each device gathers the batch's rows it holds (the
    others zero) and an exact reduce-scatter hands each device its block."""
    if bounds is None:
      return jax.vmap(lambda i: _gather(data, i))(idx)
    rows = data["where"].shape[0] // mesh.size
    ax = sharding_lib.DATA_AXIS
    spec, bspec = jax.sharding.PartitionSpec(ax), jax.sharding.PartitionSpec(None, ax)

    def local(d, i):
      offset = jax.lax.axis_index(ax) * rows
      li = jnp.where(i >= 0, i - offset, -1)
      if stratified:
        return jax.vmap(lambda j: _gather(d, j))(li)
      li = jnp.where(li < rows, li, -1)  # rows on other devices: zero here
      mine = li >= 0
      out = {}
      for k, v in d.items():
        g = v[jnp.maximum(li, 0)]
        g = jnp.where(mine.reshape(mine.shape + (1,) * (g.ndim - 2)), g, jnp.zeros((), g.dtype))
        out[k] = _exact_sum_scatter(g, ax)
      return out

    return jax.shard_map(
      local, mesh=mesh, in_specs=(spec, bspec if stratified else jax.sharding.PartitionSpec()), out_specs=bspec
    )(data, idx)

  def seed_batch(b):
    """A streamed batch ``[B, ...]``, the same for every seed: ``[S, B, ...]``."""
    return {k: jnp.broadcast_to(v[None], (num_seeds,) + v.shape) for k, v in b.items()}

  # --- Initial state -------------------------------------------------------
  def init_state(seed_ids, data, idx):  # data is an argument, not a baked-in constant
    batch = seed_batch(idx) if streaming else gather(data, idx)

    def one(seed, b):
      key = jax.random.key(seed)
      init_key, run_key = jax.random.split(key)
      params, extra = method.init(init_key, b)
      return params, extra, tx.init(params), jax.random.key_data(run_key)

    params, extra, opt_state, rng = jax.vmap(one)(seed_ids, batch)
    return {
      "params": params,
      "extra": extra,
      "opt_state": opt_state,
      "rng": rng,
      "step": jnp.zeros((), jnp.int32),
      "best_params": params,
      "best_extra": extra,
      "best_metric": jnp.full((num_seeds,), -jnp.inf, jnp.float32),
      "best_step": jnp.zeros((num_seeds,), jnp.int32),
      "evals_since_best": jnp.zeros((num_seeds,), jnp.int32),
    }

  if streaming:
    idx0 = jax.tree.map(lambda v: v[0], stream.put_one(first))
  else:
    idx0 = batch_indices(0)
  state = jax.jit(init_state, out_shardings=rep)(np.asarray(seeds, np.uint32), data, idx0)

  # --- The train step --------------------------------------------------------
  def train_step(state, data, idx):
    batch = seed_batch(idx) if streaming else gather(data, idx)  # [S, B, ...]
    batch = jax.lax.with_sharding_constraint(batch, batch_sharding)

    def one(params, extra, opt_state, rng, b):
      key = jax.random.fold_in(jax.random.wrap_key_data(rng), state["step"])
      click_key, loss_key = jax.random.split(key)
      if display != "logged":
        b = display_batch(b, method.score(params, b), mode=display, key=jax.random.fold_in(key, 1))
      if click_fn is not None:
        b = {**b, **click_fn(click_key, b)}
      (loss, (aux, new_extra)), grads = jax.value_and_grad(method.loss, has_aux=True)(params, extra, b, loss_key)
      updates, opt_state = tx.update(grads, opt_state, params)
      params = optax.apply_updates(params, updates)
      return params, new_extra, opt_state, {"loss": loss, **aux}

    params, extra, opt_state, step_metrics = jax.vmap(one)(
      state["params"], state["extra"], state["opt_state"], state["rng"], batch
    )
    new_state = {**state, "params": params, "extra": extra, "opt_state": opt_state, "step": state["step"] + 1}
    return new_state, step_metrics

  def train_steps(state, data, idx, live):
    """``K`` steps in one call (``idx [K, S, B]``, or a streamed chunk ``{name: [K, B, ...]}``); a step where
    ``live [K]`` is False leaves the state as it was (so a shorter last call reuses the same compiled function)."""

    def body(st, xs):
      i, ok = xs
      new, sm = train_step(st, data, i)
      keep = lambda a, b: jnp.where(ok, a, b)  # noqa: E731
      return jax.tree.map(keep, new, st), jax.tree.map(lambda v: jnp.where(ok, v, 0), sm)

    state, sm = jax.lax.scan(body, state, (idx, live))
    return state, jax.tree.map(lambda v: jnp.sum(v, axis=0), sm)

  train_steps = jax.jit(train_steps, donate_argnums=(0,))

  def update_best(state, metric):
    improved = metric > state["best_metric"]
    return {
      **state,
      "best_params": _tree_where(improved, state["params"], state["best_params"]),
      "best_extra": _tree_where(improved, state["extra"], state["best_extra"]),
      "best_metric": jnp.where(improved, metric, state["best_metric"]),
      "best_step": jnp.where(improved, state["step"], state["best_step"]),
      "evals_since_best": jnp.where(improved, 0, state["evals_since_best"] + 1),
    }

  update_best = jax.jit(update_best, donate_argnums=(0,))

  # --- Resume ------------------------------------------------------------------
  history: list[dict] = []
  ckpt, fingerprint = None, None
  total = int(config.steps)
  diverged = np.zeros((num_seeds,), bool)
  if workdir is not None:
    ckpt_dir = os.path.join(os.path.abspath(workdir), "checkpoints", name)
    if config.restart and os.path.isdir(ckpt_dir):
      shutil.rmtree(ckpt_dir)
      if config.progress:
        _progress(f"[{name}] restart: deleted the checkpoints in {ckpt_dir}")
    if streaming:
      fingerprint = _fingerprint(method, fp_batch, train_digest, valid, click_fn, config, seeds)
    else:
      fingerprint = run_fingerprint(method, train, valid, click_fn=click_fn, config=config, seeds=seeds)
    ckpt = Checkpointer(ckpt_dir, max_to_keep=config.max_to_keep)
    latest = ckpt.latest_step()
    if latest is not None:
      differ = fingerprint_diff(ckpt.restore_meta(latest).get("fingerprint"), fingerprint)
      if differ:
        ckpt.close()
        raise ValueError(
          f"[{name}] {ckpt_dir} holds a checkpoint (step {latest}) of a different run: {', '.join(differ)} "
          "differ(s). Use another workdir, or restart=True in the train config (--config.train.restart=True) "
          "to delete it and start over"
        )
      if latest > total:
        ckpt.close()
        raise ValueError(
          f"[{name}] {ckpt_dir} holds a checkpoint at step {latest}, past config.steps={total}; "
          "use another workdir or restart=True"
        )
      state, meta = ckpt.restore(state)
      state = jax.device_put(state, rep)
      history = list(meta.get("history", []))
      diverged = np.asarray(meta.get("diverged", diverged.tolist()), bool)
      if streaming:
        stream.resume(int(_host(state["step"])), meta.get("stream_state"))
      if config.progress:
        _progress(f"[{name}] resumed from step {int(state['step'])}")
    results_lib.record_run(workdir, name, fingerprint=fingerprint["hash"])

  # --- Loop --------------------------------------------------------------------
  step = int(_host(state["step"]))
  eval_every = max(1, int(config.eval_every))
  ckpt_every = int(config.checkpoint_every) or eval_every
  loss_acc, loss_n = None, 0
  t0, s0 = time.perf_counter(), step
  periods = [eval_every, ckpt_every] + ([int(config.progress_every)] if config.progress_every else [])
  period = functools.reduce(math.gcd, periods)
  per_call = max(d for d in range(1, min(period, max(1, int(config.steps_per_call))) + 1) if period % d == 0)

  def do_eval(state):
    if valid is None:
      return state, None
    m = evaluate(method, _local(state["params"]), valid, cutoffs=cutoffs, batch_size=config.eval_batch_size)
    if select not in m:
      raise ValueError(f"select_metric {select!r} not among {sorted(m)}")
    state = update_best(state, np.asarray(m[select], np.float32))
    return state, m

  def save(state):
    if ckpt is not None:
      meta = {"history": history, "fingerprint": fingerprint, "diverged": diverged.tolist()}
      if streaming:
        meta["stream_state"] = stream.consumed_state
      ckpt.save(int(_host(state["step"])), state, meta)

  def check_finite(state, means, step):
    """Marks (or, with on_divergence="raise", refuses) the seeds whose loss or parameters are not finite."""
    loss = np.asarray(means["loss"], np.float64).reshape(num_seeds, -1)
    bad = ~np.isfinite(loss).all(-1) | ~_host(_finite_params(state["params"]))
    if not bad.any():
      return
    which = [seeds[i] for i in np.flatnonzero(bad)]
    if config.on_divergence == "raise":
      if ckpt is not None:
        ckpt.close()  # the last good checkpoint stays; the diverged state is not saved
      raise FloatingPointError(
        f"[{name}] diverged at step {step}: seed(s) {which} have a non-finite loss "
        f"({np.asarray(means['loss']).tolist()}) or parameters. Lower the learning rate or clip the "
        "gradients (grad_clip), or set on_divergence='mark' to keep going and mark those seeds"
      )
    new = bad & ~diverged
    diverged[:] = diverged | bad
    if new.any() and config.progress:
      _progress(f"[{name}] step {step}: seed(s) {[seeds[i] for i in np.flatnonzero(new)]} diverged (marked)")

  if streaming:
    stream.start(step, total, per_call, max(1, int(config.prefetch)))
  while step < total:
    # up to the next multiple of per_call (every evaluation, checkpoint and progress line is at one)
    n = min(per_call - step % per_call, total - step)
    if streaming:
      idx, got = stream.next_chunk()
      if got < n:  # the stream ended: train on what it gave, evaluate and save, then stop
        n, total = got, step + got
        if n == 0 and loss_n == 0:
          break
    else:
      idx = np.stack([batch_indices(step + min(j, n - 1)) for j in range(per_call)])
    state, sm = train_steps(state, data, idx, np.arange(per_call) < n)
    if streaming:
      stream.refill(after=sm)  # while the devices compute (dispatch is asynchronous)
    step += n
    loss_acc = sm if loss_acc is None else jax.tree.map(jnp.add, loss_acc, sm)
    loss_n += n
    at_eval = step % eval_every == 0 or step == total
    if config.progress and config.progress_every and step % config.progress_every == 0 and not at_eval:
      rate = (step - s0) / max(time.perf_counter() - t0, 1e-9)  # includes the first step's compile
      _progress(f"[{name}] step {step}/{total} ({rate:.2f} steps/s, ~{(total - step) / rate:.0f}s left)")
    if at_eval:
      means = _host(jax.tree.map(lambda v: v / loss_n, loss_acc))
      check_finite(state, means, step)
      state, m = do_eval(state)
      record = {"step": step, **{f"train/{k}": np.asarray(v).tolist() for k, v in means.items()}}
      if m is not None:
        record.update({f"valid/{k}": np.asarray(v).tolist() for k, v in m.items()})
      if diverged.any():
        record["diverged"] = diverged.tolist()
      history.append(record)
      if on_eval is not None:
        on_eval(record)
      loss_acc, loss_n = None, 0
      if config.progress:
        rate = (step - s0) / max(time.perf_counter() - t0, 1e-9)
        msg = f"[{name}] step {step}/{total} loss {np.mean(means['loss']):.4f}"
        if m is not None:
          msg += f" valid {select} {np.mean(m[select]):.4f}"
        _progress(msg + f" ({rate:.1f} steps/s)")
    if step % ckpt_every == 0 or step == total:
      save(state)
    if at_eval and valid is not None and config.patience > 0:
      if bool(np.all(_host(state["evals_since_best"]) >= config.patience)):
        save(state)
        break
  if ckpt is not None:
    ckpt.close()
  if diverged.any():
    results_lib.record_run(workdir, name, diverged=[seeds[i] for i in np.flatnonzero(diverged)])

  if streaming:
    stream.close()
  state = _host(state)
  if valid is None:
    params, extra = state["params"], state["extra"]
    best_step = np.full((num_seeds,), step, np.int64)
    best_metric = np.full((num_seeds,), np.nan)
  else:
    params, extra = state["best_params"], state["best_extra"]
    best_step, best_metric = np.asarray(state["best_step"]), np.asarray(state["best_metric"])
  return FitResult(
    params=params,
    extra=extra,
    history=history,
    best_step=best_step,
    best_metric=best_metric,
    final_params=state["params"],
    diverged=diverged.copy(),
    fingerprint=fingerprint,
  )
