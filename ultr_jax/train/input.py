"""The training lists on the devices and the batches :func:`~ultr_jax.train.fit` draws from them.

In memory, the lists are placed once (replicated on one device, or sharded over the mesh in padded strata,
:func:`~ultr_jax.train.sharding.shard_query_arrays`); each step's query indices are drawn on the host
(deterministic in the seed, the data seed and the step) and the batch is gathered inside the jitted step.
"""

import dataclasses
import functools
from typing import Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from ultr_jax.data import RankingDataset
from ultr_jax.train import sharding as sharding_lib
from ultr_jax.train.defaults import with_defaults

__all__ = ["training_arrays", "TrainLayout", "place_train", "seed_batch", "step_batch", "mask_padding"]


def _masked_host(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """:func:`mask_padding` of host arrays, once, as the lists are placed; an array whose masked entries are all
  zero already is passed as it is (no copy)."""
  where = np.asarray(arrays["where"])
  out = {}
  for k, v in arrays.items():
    v = np.asarray(v)
    if k != "where" and v.dtype.kind in "fc" and v.shape[: where.ndim] == where.shape:
      mask = where.reshape(where.shape + (1,) * (v.ndim - where.ndim))
      if np.any((v != 0) & ~mask):
        v = np.where(mask, v, np.zeros((), v.dtype))
    out[k] = v
  return out


def _device_arrays(arrays: Mapping[str, np.ndarray], sharding) -> dict[str, jax.Array]:
  out = {}
  for k, v in arrays.items():
    v = np.asarray(v)
    if v.dtype == np.float64:
      v = v.astype(np.float32)
    elif v.dtype == np.int64:
      v = v.astype(np.int32)
    out[k] = jax.device_put(v, sharding)
  return out


def _place_train(ds: RankingDataset, mesh, config) -> tuple[dict, Optional[np.ndarray], int]:
  """``(arrays, stratum bounds or None, K)``: the training lists on the devices as :func:`fit` holds them."""
  multiprocess = jax.process_count() > 1
  num_strata = int(config.data_shards) or (1 if mesh.size == 1 and not multiprocess else mesh.size)
  if num_strata == 1 and not multiprocess and not config.data_shards:
    # One device, default config: the whole set as one unpadded array, one permutation per epoch.
    return _device_arrays(_masked_host(ds.as_batch()), sharding_lib.replicated(mesh)), None, 1
  num_queries = ds.num_queries
  if multiprocess and config.local_data:
    from jax.experimental import multihost_utils  # noqa: PLC0415

    num_queries = int(np.sum(multihost_utils.process_allgather(np.asarray([ds.num_queries]))))
  elif multiprocess:
    lo, hi = sharding_lib.process_query_range(num_queries, num_strata)
    ds = ds.subset(np.arange(lo, hi))
  data, bounds = sharding_lib.shard_query_arrays(_masked_host(ds.as_batch()), mesh, num_strata, num_queries)
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

  Args:
    train: the training :class:`~ultr_jax.data.RankingDataset` (this process's queries in a multi-process run).
    config: the training config (None: the defaults).

  Returns:
    A dict of the training arrays, as placed on the devices.

  >>> from ultr_jax import data
  >>> train = data.make_synthetic(num_train=10, num_valid=1, num_test=1, list_size=4, num_features=3).train
  >>> a = training_arrays(train, {"num_devices": 1, "data_shards": 4})
  >>> a["where"].shape, a["where"].any(-1).sum().item()  # 4 strata of ceil(10 / 4) = 3 rows, 10 of them real
  ((12, 4), 10)
  """
  config = with_defaults(config)
  mesh = sharding_lib.make_mesh(config.num_devices or None)
  return _place_train(train, mesh, config)[0]


def _gather(data: Mapping[str, jax.Array], idx: jax.Array) -> dict[str, jax.Array]:
  """Rows ``idx`` of every array (plain indexing); ``idx < 0`` yields an all-masked query."""
  safe = jnp.maximum(idx, 0)
  batch = {k: v[safe] for k, v in data.items()}
  batch["where"] = batch["where"] & (idx >= 0)[..., None]
  return batch


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


def _local_gather(d: Mapping[str, jax.Array], i: jax.Array, *, rows: int, stratified: bool) -> dict[str, jax.Array]:
  """One device's part of :meth:`TrainLayout.gather` (under ``shard_map``): its ``rows`` of the lists ``d``."""
  ax = sharding_lib.DATA_AXIS
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


@dataclasses.dataclass(frozen=True, eq=False)
class TrainLayout:
  """How :func:`~ultr_jax.train.fit`'s in-memory training lists lie on the devices and how a step's batch is
  drawn from them (:func:`place_train` makes it).

  ``data_shards=0``: one permutation of all queries per epoch (on sharded data, mapped to the padded rows);
  ``data_shards=K``: ``B / K`` queries from each stratum, so each device's block of the batch is on that device.

  Attributes:
    mesh: the 1-D data mesh.
    seeds: one run per seed.
    batch_size: ``B``, rounded up to a multiple of the devices (or strata).
    data_seed: the batch order's seed (with each run's seed).
    num_queries: ``Q``, the training queries.
    bounds: ``int64[K + 1]`` strata bounds of the sharded layout; None for one unpadded array.
    stratified: the batches are drawn per stratum (``data_shards > 0``).
    rows_of: ``int32[Q]`` each query's row in the padded layout (sharded, not stratified).
  """

  mesh: jax.sharding.Mesh
  seeds: tuple
  batch_size: int
  data_seed: int
  num_queries: int
  bounds: Optional[np.ndarray] = None
  stratified: bool = False
  rows_of: Optional[np.ndarray] = None

  def indices(self, step: int) -> np.ndarray:
    """``int32[S, B]`` the rows of ``step``'s batch (``-1``: an all-masked list).

    >>> from ultr_jax import data
    >>> from ultr_jax.train import default_train_config, make_mesh
    >>> train = data.make_synthetic(num_train=10, num_valid=1, num_test=1, list_size=4, num_features=3).train
    >>> c = default_train_config(); c.batch_size = 4
    >>> _, layout = place_train(train, make_mesh(1), c, seeds=(0, 1))
    >>> layout.indices(0).shape
    (2, 4)
    """
    if self.bounds is None:
      return _batch_indices(self.num_queries, self.batch_size, step, self.seeds, self.data_seed)
    if self.stratified:
      return _stratified_indices(self.bounds, self.batch_size, step, self.seeds, self.data_seed)
    idx = _batch_indices(int(self.bounds[-1]), self.batch_size, step, self.seeds, self.data_seed)
    assert self.rows_of is not None  # set for a sharded, unstratified layout
    return np.where(idx >= 0, self.rows_of[np.maximum(idx, 0)], -1).astype(np.int32)

  def queries(self, step: int) -> np.ndarray:
    """``int32[S, B]`` the training queries (indices into the dataset) of ``step``'s batch (``-1``: padding).

    >>> from ultr_jax import data
    >>> from ultr_jax.train import default_train_config, make_mesh
    >>> train = data.make_synthetic(num_train=10, num_valid=1, num_test=1, list_size=4, num_features=3).train
    >>> c = default_train_config(); c.batch_size, c.data_shards = 4, 2
    >>> _, layout = place_train(train, make_mesh(1), c, seeds=(0,))
    >>> bool(np.isin(layout.queries(0), np.arange(10)).all())
    True
    """
    if self.bounds is None or not self.stratified:
      n = self.num_queries if self.bounds is None else int(self.bounds[-1])
      return _batch_indices(n, self.batch_size, step, self.seeds, self.data_seed)
    rows = self.indices(step)
    m = max(1, int(np.max(np.diff(self.bounds))))
    k, j = np.maximum(rows, 0) // m, np.maximum(rows, 0) % m
    return np.where(rows >= 0, self.bounds[k] + j, -1).astype(np.int32)

  def gather(self, data: Mapping[str, jax.Array], idx: jax.Array) -> dict[str, jax.Array]:
    """``[S, B, ...]`` the rows ``idx [S, B]`` of ``data``, sharded over the batch axis (traced, in the step).

    Stratified: each device gathers its block of the batch from the strata it holds. Otherwise (rows
    anywhere): each device gathers the batch's rows it holds (the others zero) and an exact reduce-scatter
    hands each device its block.
    """
    if self.bounds is None:
      return jax.vmap(lambda i: _gather(data, i))(idx)
    ax = sharding_lib.DATA_AXIS
    spec, bspec = jax.sharding.PartitionSpec(ax), jax.sharding.PartitionSpec(None, ax)
    local = functools.partial(_local_gather, rows=data["where"].shape[0] // self.mesh.size, stratified=self.stratified)
    return jax.shard_map(
      local,
      mesh=self.mesh,
      in_specs=(spec, bspec if self.stratified else jax.sharding.PartitionSpec()),
      out_specs=bspec,
    )(data, idx)


def place_train(
  train: RankingDataset, mesh: jax.sharding.Mesh, config: ml_collections.ConfigDict, seeds: Sequence[int]
) -> tuple[dict[str, jax.Array], TrainLayout]:
  """The training lists on the devices (:func:`training_arrays`) and the :class:`TrainLayout` to draw from them.

  Every floating per-item entry under the mask is zeroed as the lists are placed (``input.mask_padding``, on the
  host, once), so no padded NaN or inf reaches a step.

  Args:
    train: the training lists (this process's queries in a multi-process run with ``config.local_data``).
    mesh: the 1-D data mesh.
    config: the full train config (``batch_size``, ``data_shards``, ``data_seed``, ``local_data``).
    seeds: one run per seed.

  Returns:
    ``(arrays, layout)``.

  >>> from ultr_jax import data
  >>> from ultr_jax.train import default_train_config, make_mesh
  >>> train = data.make_synthetic(num_train=10, num_valid=1, num_test=1, list_size=4, num_features=3).train
  >>> arrays, layout = place_train(train, make_mesh(1), default_train_config(), seeds=(0,))
  >>> arrays["where"].shape, layout.batch_size
  ((10, 4), 64)
  """
  data, bounds, num_strata = _place_train(train, mesh, config)
  batch_size = sharding_lib.round_up(int(config.batch_size), mesh.size if bounds is None else num_strata)
  stratified = bool(config.data_shards)
  rows_of = None if bounds is None or stratified else _query_rows(bounds)
  layout = TrainLayout(
    mesh=mesh,
    seeds=tuple(int(s) for s in seeds),
    batch_size=batch_size,
    data_seed=int(config.data_seed),
    num_queries=train.num_queries,
    bounds=bounds,
    stratified=stratified,
    rows_of=rows_of,
  )
  return data, layout


def mask_padding(batch: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
  r"""The batch with every floating per-item entry under the mask set to zero: the double-``where`` rule at the
  point where a batch enters training, so that a NaN or inf in a padded item can reach neither the model nor the
  loss (a masked loss still multiplies the model's output by zero, and :math:`0 \cdot \mathrm{NaN}` is NaN).

  .. math:: x'_{\ldots i} = \begin{cases} x_{\ldots i} & \mathrm{where}_{\ldots i} \\ 0 & \text{otherwise} \end{cases}

  Args:
    batch: ``where [..., L]`` and arrays; those with leading dims ``where.shape`` and a float dtype are per-item
      (features ``[..., L, F]``, labels, clicks, propensities); the others pass through.

  Returns:
    The batch, masked.

  >>> b = {"features": jnp.array([[[1.0], [jnp.nan]]]), "where": jnp.array([[True, False]])}
  >>> mask_padding(b)["features"].ravel().tolist()
  [1.0, 0.0]
  """
  where = batch["where"]
  out = {}
  for k, v in batch.items():
    if k != "where" and jnp.issubdtype(v.dtype, jnp.inexact) and v.shape[: where.ndim] == where.shape:
      v = jnp.where(where.reshape(where.shape + (1,) * (v.ndim - where.ndim)), v, jnp.zeros((), v.dtype))
    out[k] = v
  return out


def seed_batch(batch: Mapping[str, jax.Array], num_seeds: int) -> dict[str, jax.Array]:
  """A streamed batch ``[B, ...]``, the same for every seed: ``[S, B, ...]``.

  >>> seed_batch({"where": jnp.ones((3, 2), bool)}, 2)["where"].shape
  (2, 3, 2)
  """
  return {k: jnp.broadcast_to(v[None], (num_seeds,) + v.shape) for k, v in batch.items()}


def step_batch(
  layout: Optional[TrainLayout], data: Optional[Mapping[str, jax.Array]], idx, num_seeds: int
) -> dict[str, jax.Array]:
  """The ``[S, B, ...]`` batch a step trains on: gathered from ``data`` at ``idx`` (in memory, ``layout``), or
  the streamed batch ``idx`` itself (``layout`` None) for every seed. Padded entries are zero: a streamed
  batch is masked here (:func:`mask_padding`), the in-memory lists once as they are placed (:func:`place_train`).

  >>> step_batch(None, None, {"where": jnp.ones((3, 2), bool)}, 2)["where"].shape
  (2, 3, 2)
  """
  if layout is None:
    return seed_batch(mask_padding(idx), num_seeds)
  assert data is not None, "step_batch: an in-memory layout gathers from the lists on the devices"
  return layout.gather(data, idx)
