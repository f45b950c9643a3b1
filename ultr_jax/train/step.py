"""The jitted training step of :func:`~ultr_jax.train.fit`: a batch, the displayed order, simulated clicks, the
method's loss and gradient, the optimizer's update; ``steps_per_call`` of them in one ``lax.scan``."""

import functools
from typing import Any, Mapping, Optional, Protocol

import jax
import jax.numpy as jnp
import optax

from ultr_jax import simulation
from ultr_jax._divergence import diagnose, first_of_call, nonfinite
from ultr_jax.train.input import TrainLayout, mask_padding, step_batch
from ultr_jax.train.method import Method
from ultr_jax.train.state import TrainState
from ultr_jax.types import ClickFn

__all__ = ["TrainSteps", "display_batch", "mask_padding", "train_step", "make_train_steps"]


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

  Returns:
    A new batch dict: the same entries, each list reordered as displayed.

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


def train_step(
  state: TrainState,
  data: Optional[Mapping[str, jax.Array]],
  idx: Any,
  *,
  method: Method,
  tx: optax.GradientTransformation,
  layout: Optional[TrainLayout],
  click_fn: Optional[ClickFn],
  display: str,
  batch_sharding: jax.sharding.Sharding,
) -> tuple[TrainState, dict, dict]:
  """One training step of every seed (traced: the body of :func:`make_train_steps`).

  Each seed's key for the step is its run key folded with the step, split into a click key and a loss key;
  the batch is shown in the ``display`` order, clicked by ``click_fn`` (if any), and the params take one
  optimizer step on ``method.loss``.

  Args:
    state: the training state (:func:`~ultr_jax.train.create_train_state`).
    data: the in-memory training lists (None for a stream).
    idx: the batch's indices ``[S, B]`` (in memory) or the streamed batch ``{name: [B, ...]}``.
    method: the method to train.
    tx: its optimizer.
    layout: the in-memory layout (None for a stream).
    click_fn: ``click_fn(key, batch) -> dict`` merged into the batch, or None (logged clicks).
    display: ``"logged"``, ``"model"`` or ``"model_sample"`` (:func:`display_batch`).
    batch_sharding: the batch's sharding (over its batch axis).

  Returns:
    ``(new state, {"loss": [S], **aux}, diagnosis)``: ``diagnosis["ok"]``, every seed's loss and new params
    are finite; when not, which of the batch's inputs and which parameter leaves (before and after the step)
    hold non-finite values (all False otherwise: a ``lax.cond``, computed only on a bad step).
  """
  batch = step_batch(layout, data, idx, state.num_seeds)  # [S, B, ...]
  batch = jax.lax.with_sharding_constraint(batch, batch_sharding)

  def one(params, extra, opt_state, rng, b):
    key = jax.random.fold_in(jax.random.wrap_key_data(rng), state.step)
    click_key, loss_key = jax.random.split(key)
    if display != "logged":
      b = display_batch(b, method.score(params, b), mode=display, key=jax.random.fold_in(key, 1))
    if click_fn is not None:
      b = {**b, **click_fn(click_key, b)}
    (loss, (aux, new_extra)), grads = jax.value_and_grad(method.loss, has_aux=True)(params, extra, b, loss_key)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, new_extra, opt_state, {"loss": loss, **aux}

  params, extra, opt_state, step_metrics = jax.vmap(one)(state.params, state.extra, state.opt_state, state.rng, batch)
  new_state = state.replace(params=params, extra=extra, opt_state=opt_state, step=state.step + 1)
  # A step is healthy when every seed's loss and new params are finite; else (a lax.cond: no cost otherwise) the
  # diagnosis names the non-finite inputs and params.
  ok = jnp.all(jnp.isfinite(step_metrics["loss"])) & ~jnp.any(
    jnp.stack(jax.tree.leaves(jax.tree.map(nonfinite, params)))
  )
  diagnosis = jax.lax.cond(
    ok,
    lambda: diagnose(batch, state.params, params, healthy=True),
    lambda: diagnose(batch, state.params, params, healthy=False),
  )
  return new_state, step_metrics, {"ok": ok, **diagnosis}


class _StepFn(Protocol):
  def __call__(self, state: TrainState, data: Any, idx: Any) -> tuple[TrainState, dict, dict]: ...


class TrainSteps(Protocol):
  """What :func:`make_train_steps` returns: ``train_steps(state, data, idx, live) -> (state, summed step metrics,
  diagnosis)``."""

  def __call__(self, state: TrainState, data: Any, idx: Any, live: Any) -> tuple[TrainState, dict, dict]: ...


def _train_steps(
  state: TrainState, data: Any, idx: Any, live: jax.Array, *, step_fn: _StepFn
) -> tuple[TrainState, dict, dict]:
  def body(st, xs):
    i, ok = xs
    new, sm, diagnosis = step_fn(st, data, i)
    keep = lambda a, b: jnp.where(ok, a, b)  # noqa: E731
    return jax.tree.map(keep, new, st), (jax.tree.map(lambda v: jnp.where(ok, v, 0), sm), diagnosis)

  state, (sm, diagnosis) = jax.lax.scan(body, state, (idx, live))
  # the call's first step with a non-finite loss or params
  first = first_of_call(diagnosis["ok"], {k: v for k, v in diagnosis.items() if k != "ok"}, live)
  return state, jax.tree.map(lambda v: jnp.sum(v, axis=0), sm), first


def make_train_steps(
  method: Method,
  tx: optax.GradientTransformation,
  *,
  layout: Optional[TrainLayout],
  click_fn: Optional[ClickFn],
  display: str,
  batch_sharding: jax.sharding.Sharding,
) -> TrainSteps:
  """``train_steps(state, data, idx, live) -> (state, summed step metrics, diagnosis)``: ``K`` steps in one
  jitted call.

  ``idx`` is ``[K, S, B]`` (in memory) or a streamed chunk ``{name: [K, B, ...]}``; a step where ``live [K]``
  is False leaves the state as it was (so a shorter last call reuses the same compiled function). The state
  is donated. ``diagnosis["first"]`` is the call's first step (``0..K-1``) whose loss or new params are not
  finite, or -1; the
  rest of it is that step's (``step.train_step``).

  Args:
    method: the method to train.
    tx: its optimizer.
    layout: the in-memory :class:`~ultr_jax.train.TrainLayout` (None for a stream).
    click_fn: ``click_fn(key, batch) -> dict`` merged into each batch, or None (logged clicks).
    display: ``"logged"``, ``"model"`` or ``"model_sample"`` (:func:`display_batch`).
    batch_sharding: the batch's sharding (over its batch axis).

  Returns:
    The jitted ``train_steps`` (:class:`TrainSteps`).

  >>> import numpy as np
  >>> from ultr_jax import data
  >>> from ultr_jax.train import create_train_state, default_train_config, get_method, make_mesh, make_optimizer
  >>> from ultr_jax.train import place_train
  >>> from ultr_jax.train.sharding import replicated
  >>> train = data.make_synthetic(num_train=8, num_valid=1, num_test=1, list_size=4, num_features=3).train
  >>> train = train.with_extras(clicks=(train.labels >= 2).astype(np.float32))
  >>> m = get_method("naive", {"ranker": "linear"}, num_features=3, list_size=4)
  >>> mesh, c = make_mesh(1), default_train_config()
  >>> arrays, layout = place_train(train, mesh, c, seeds=(0,))
  >>> tx = make_optimizer(c)
  >>> s = create_train_state(m, tx, np.array([0], np.uint32), arrays, layout.indices(0), layout=layout,
  ...                        sharding=replicated(mesh))
  >>> steps = make_train_steps(m, tx, layout=layout, click_fn=None, display="logged", batch_sharding=replicated(mesh))
  >>> s, sm, diagnosis = steps(s, arrays, np.stack([layout.indices(0), layout.indices(1)]), np.array([True, True]))
  >>> int(s.step), sm["loss"].shape, int(diagnosis["first"])
  (2, (1,), -1)
  """
  step_fn = functools.partial(
    train_step,
    method=method,
    tx=tx,
    layout=layout,
    click_fn=click_fn,
    display=display,
    batch_sharding=batch_sharding,
  )
  return jax.jit(functools.partial(_train_steps, step_fn=step_fn), donate_argnums=(0,))
