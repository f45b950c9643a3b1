"""The training state of :func:`~ultr_jax.train.fit`: every tower's params, the non-trained method state, the
optimizer state, the RNG, the step and the best-so-far state per seed (leaves carry a leading seed axis)."""

import functools
from typing import Any, Mapping, Optional

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ultr_jax.train.input import TrainLayout, step_batch
from ultr_jax.train.method import Method

__all__ = ["TrainState", "create_train_state", "update_best", "finite_params", "tree_where", "host", "local"]


def host(tree):
  """``tree`` on the host as NumPy; a replicated array spanning several processes is read from a local copy."""

  def get(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      x = x.addressable_data(0)
    return np.asarray(jax.device_get(x))

  return jax.tree.map(get, tree)


def local(tree):
  """Replicated global arrays as this process's single-device copies (for host-side evaluation)."""
  return jax.tree.map(
    lambda x: x.addressable_data(0) if isinstance(x, jax.Array) and not x.is_fully_addressable else x, tree
  )


@jax.jit
def finite_params(params):
  """``bool[S]``: every float leaf of the seed's params is finite (leaves carry a leading seed axis)."""
  oks = [
    jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1)
    for x in jax.tree.leaves(params)
    if jnp.issubdtype(x.dtype, jnp.inexact) and x.ndim > 0
  ]
  return functools.reduce(jnp.logical_and, oks) if oks else jnp.ones((), bool)


def tree_where(cond, new, old):
  """Per-seed select: ``cond`` is ``bool[S]``; leaves have a leading seed axis."""

  def sel(n, o):
    c = cond.reshape(cond.shape + (1,) * (n.ndim - 1))
    return jnp.where(c, n, o)

  return jax.tree.map(sel, new, old)


class TrainState(flax.struct.PyTreeNode):
  """The state :func:`~ultr_jax.train.fit` carries from step to step: a pytree, leaves ``[S, ...]`` (one row per
  seed) except ``step``.

  Attributes:
    params: the trained pytree of every seed (``method.init``'s first value).
    extra: the method's non-trained state (``method.init``'s second value, updated by its loss).
    opt_state: the optimizer's state of ``params``.
    rng: ``uint32[S, 2]`` each seed's run key as key data (``jax.random.key_data``), folded with ``step``.
    step: ``int32[]`` the number of steps taken.
    best_params: the params at each seed's best validation metric so far (the initial params at first).
    best_extra: the matching ``extra``.
    best_metric: ``float32[S]`` each seed's best validation metric (:math:`-\\infty` at first).
    best_step: ``int32[S]`` the step of ``best_params``.
    evals_since_best: ``int32[S]`` evaluations since each seed's metric last improved (early stopping).

  >>> s = TrainState(params={"w": jnp.zeros((2, 3))}, extra={}, opt_state=(), rng=jnp.zeros((2, 2), jnp.uint32),
  ...                step=jnp.zeros((), jnp.int32), best_params={"w": jnp.zeros((2, 3))}, best_extra={},
  ...                best_metric=jnp.full((2,), -jnp.inf), best_step=jnp.zeros((2,), jnp.int32),
  ...                evals_since_best=jnp.zeros((2,), jnp.int32))
  >>> s.num_seeds, int(s.replace(step=s.step + 1).step)
  (2, 1)
  """

  params: Any
  extra: Any
  opt_state: Any
  rng: jax.Array
  step: jax.Array
  best_params: Any
  best_extra: Any
  best_metric: jax.Array
  best_step: jax.Array
  evals_since_best: jax.Array

  @property
  def num_seeds(self) -> int:
    """``S``, the number of seeds trained in lockstep."""
    return int(self.best_metric.shape[0])


def _init_state(
  seed_ids: jax.Array,
  data: Optional[Mapping[str, jax.Array]],
  idx: Any,
  *,
  method: Method,
  tx: optax.GradientTransformation,
  layout: Optional[TrainLayout],
) -> TrainState:
  batch = step_batch(layout, data, idx, seed_ids.shape[0])  # data is an argument, not a baked-in constant
  num_seeds = seed_ids.shape[0]

  def one(seed, b):
    key = jax.random.key(seed)
    init_key, run_key = jax.random.split(key)
    params, extra = method.init(init_key, b)
    return params, extra, tx.init(params), jax.random.key_data(run_key)

  params, extra, opt_state, rng = jax.vmap(one)(seed_ids, batch)
  return TrainState(
    params=params,
    extra=extra,
    opt_state=opt_state,
    rng=rng,
    step=jnp.zeros((), jnp.int32),
    best_params=params,
    best_extra=extra,
    best_metric=jnp.full((num_seeds,), -jnp.inf, jnp.float32),
    best_step=jnp.zeros((num_seeds,), jnp.int32),
    evals_since_best=jnp.zeros((num_seeds,), jnp.int32),
  )


def create_train_state(
  method: Method,
  tx: optax.GradientTransformation,
  seeds: Any,
  data: Optional[Mapping[str, jax.Array]],
  idx: Any,
  *,
  layout: Optional[TrainLayout],
  sharding: jax.sharding.Sharding,
) -> TrainState:
  """The initial training state of ``len(seeds)`` runs, replicated with ``sharding``.

  Each seed's key is split into an init key (``method.init`` on the first batch) and the run's key
  (its clicks and losses, folded with the step). The best-so-far state starts at the initial params with
  metric :math:`-\\infty`.

  Args:
    method: the method to train.
    tx: its optimizer.
    seeds: ``[S]`` the runs' seeds.
    data: the in-memory training lists on the devices (None for a stream).
    idx: the first batch's indices ``[S, B]`` (in memory) or the first streamed batch ``{name: [B, ...]}``.
    layout: the in-memory :class:`~ultr_jax.train.TrainLayout` (None for a stream).
    sharding: where the state lives (replicated over the mesh).

  Returns:
    A :class:`TrainState`, leaves ``[S, ...]`` (``step`` a scalar).

  >>> from ultr_jax import data
  >>> from ultr_jax.train import default_train_config, get_method, make_mesh, make_optimizer, place_train
  >>> from ultr_jax.train.sharding import replicated
  >>> train = data.make_synthetic(num_train=8, num_valid=1, num_test=1, list_size=4, num_features=3).train
  >>> m = get_method("naive", {"ranker": "linear"}, num_features=3, list_size=4)
  >>> mesh, c = make_mesh(1), default_train_config()
  >>> arrays, layout = place_train(train, mesh, c, seeds=(0, 1))
  >>> s = create_train_state(m, make_optimizer(c), np.array([0, 1], np.uint32), arrays, layout.indices(0),
  ...                        layout=layout, sharding=replicated(mesh))
  >>> int(s.step), s.best_metric.tolist()
  (0, [-inf, -inf])
  """
  init = functools.partial(_init_state, method=method, tx=tx, layout=layout)
  return jax.jit(init, out_shardings=sharding)(seeds, data, idx)


def _update_best(state: TrainState, metric: jax.Array) -> TrainState:
  improved = metric > state.best_metric
  return state.replace(
    best_params=tree_where(improved, state.params, state.best_params),
    best_extra=tree_where(improved, state.extra, state.best_extra),
    best_metric=jnp.where(improved, metric, state.best_metric),
    best_step=jnp.where(improved, state.step, state.best_step),
    evals_since_best=jnp.where(improved, 0, state.evals_since_best + 1),
  )


#: ``update_best(state, metric [S]) -> state``: the seeds whose validation ``metric`` beats their best so far
#: keep the current params and step as their best; the others count one more evaluation without improvement.
#: The state is donated.
update_best = jax.jit(_update_best, donate_argnums=(0,))
