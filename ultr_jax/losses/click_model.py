r"""Click-model likelihood losses: a relevance tower as the attraction of a session click model.

The learner's logits :math:`s_i` are the attraction :math:`a_i = \sigma(s_i)`
of a click model whose bias parameters are learned beside them (a tower of
its own, as in the two-tower / PBM learners, but any click model of the registry with the ``loss``
capability, :data:`CLICK_MODEL_LOSSES`): the loss is the negative session log-likelihood of the logged clicks,

.. math::
    \mathcal{L} = -\frac{1}{|Q|}\sum_{q} \sum_i \log P(c_{q,i} \mid c_{q,<i};\ \sigma(s_q), \theta)

(CLAX, Hager et al. 2025, trains click models with neural towers the same
way; the PBM case is the two-tower product model). ``bias`` holds the bias
logits, :func:`click_model_bias_shapes` gives their shapes: each model states its parameters once
(:attr:`~ultr_jax.simulation.ClickModel.parameters`; the table on the :mod:`ultr_jax.simulation` API page is
generated from them). A model's per-item parameters besides the attraction
(:attr:`~ultr_jax.simulation.ClickModel.item_params`: the DBN's and SDBN's satisfaction) are further outputs
of the learner, ``item_scores`` (or ``satisfaction_scores``).

Items are taken in display order (sorted by ``positions``; masked items
last and skipped); every term is computed from ``log_sigmoid`` of the logits
(:meth:`~ultr_jax.simulation.ClickModel.log_probs_from_logits`).
"""

from typing import Optional

import jax.numpy as jnp

from ultr_jax.losses import _utils
from ultr_jax.simulation.click_models import ClickModel, bernoulli_log_likelihood, click_models, get_click_model
from ultr_jax.simulation.click_models.base import display_order, full_mask
from ultr_jax.types import Array, ReduceFn
from ultr_jax.losses.registry import register_loss

__all__ = [
  "CLICK_MODEL_LOSSES",
  "click_model_bias_shapes",
  "click_model_click_logits",
  "click_model_log_likelihood_from_logits",
  "click_model_loss",
]

#: The registry's click models usable as a loss (the ``loss`` capability; the cascade cannot explain a second
#: click, so it has none).
CLICK_MODEL_LOSSES = click_models("loss")


def _loss_model(model: "str | ClickModel") -> ClickModel:
  if not isinstance(model, ClickModel) and model not in click_models("loss"):
    raise ValueError(f"unknown click-model loss {model!r} (expected one of {click_models('loss')})")
  m = get_click_model(model)
  if not m.loss:
    raise ValueError(f"click model {m.name!r} is no click-model loss (expected one of {click_models('loss')})")
  return m


def click_model_bias_shapes(model: "str | ClickModel", num_positions: int) -> dict[str, tuple[int, ...]]:
  """Shapes of the bias logits of ``model`` over ``num_positions`` positions.

  Args:
    model: a registered click model (a name or the model).
    num_positions: the number of positions its tables cover.

  Returns:
    A dict from each bias parameter's name to its shape.

  >>> click_model_bias_shapes("ubm", 3)
  {'gamma': (3, 4)}
  """
  return _loss_model(model).bias_shapes(num_positions)


def _take(x, idx):
  return jnp.take_along_axis(x, idx, axis=-1)


def click_model_log_likelihood_from_logits(
  scores: Array,
  clicks: Array,
  *,
  model: "str | ClickModel",
  bias: dict,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  satisfaction_scores: Optional[Array] = None,
  item_scores: Optional[dict] = None,
) -> Array:
  r"""Session log-likelihood of the clicks under ``model`` with attraction :math:`\sigma(\text{scores})`.

  Args:
    scores: ``[..., L]`` attraction logits.
    clicks: ``[..., L]`` 0/1 clicks.
    model: one of :data:`CLICK_MODEL_LOSSES`.
    bias: dict of bias logits (:func:`click_model_bias_shapes`); positions
      beyond a table use its last entry.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based display positions (default: the item
      index).
    satisfaction_scores: ``[..., L]`` satisfaction logits (the models with a ``satisfaction`` item parameter:
      ``dbn``, ``sdbn``).
    item_scores: ``{name: [..., L]}`` logits of the model's other per-item parameters
      (:attr:`~ultr_jax.simulation.ClickModel.item_params`).

  Returns:
    ``float32[...]`` per list (0 for an all-masked list).

  >>> ll = click_model_log_likelihood_from_logits(jnp.zeros(2), jnp.array([1.0, 0.0]), model="dcm",
  ...                                             bias={"continuation": jnp.zeros(2)})
  >>> print(round(float(ll), 6), round(float(jnp.log(0.5 * 0.75)), 6))
  -0.980829 -0.980829
  """
  log_q, log_1mq, c, where, _, _ = _display_log_probs(
    scores, clicks, model, bias, where, positions, _items(satisfaction_scores, item_scores)
  )
  return bernoulli_log_likelihood(c, log_q, log_1mq, where=where)


def _items(satisfaction_scores, item_scores):
  items = dict(item_scores or {})
  if satisfaction_scores is not None:
    items["satisfaction"] = satisfaction_scores
  return items


def _display_log_probs(scores, clicks, model, bias, where, positions, items):
  """Per-item ``(log q, log(1 - q))`` of a click given the clicks above, in display order, with the
  clicks and the mask (display order) and the permutations to display order and back."""
  m = _loss_model(model)
  s = jnp.asarray(scores, jnp.float32)
  c = jnp.asarray(clicks, jnp.float32)
  where = full_mask(s, where)
  if positions is None:
    positions = jnp.broadcast_to(jnp.arange(s.shape[-1], dtype=jnp.int32), s.shape)
  positions = jnp.asarray(positions, jnp.int32)
  missing = [k for k in m.item_params if k not in items]
  if missing:
    raise ValueError(f"click-model loss {m.name!r} needs {missing[0]}_scores (a further output per item)")
  # Display order: by position, masked items last (they are skipped by the likelihoods anyway), as the simulators.
  order, inverse = display_order(positions, where)
  item_logits = {k: _take(jnp.asarray(items[k], jnp.float32), order) for k in m.item_params}
  c, where = _take(c, order), _take(where, order)
  log_q, log_1mq = m.log_probs_from_logits(
    c, _take(s, order), bias, ranks=_take(positions, order), where=where, item_logits=item_logits
  )
  return log_q, log_1mq, c, where, order, inverse


def click_model_click_logits(
  scores: Array,
  clicks: Array,
  *,
  model: "str | ClickModel",
  bias: dict,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  satisfaction_scores: Optional[Array] = None,
  item_scores: Optional[dict] = None,
) -> Array:
  r"""Per-item logit of a click given the session's clicks above it, under ``model``.

  .. math::
      \operatorname{logit} P(C_i = 1 \mid C_{<i}) = \log q_i - \log(1 - q_i)

  the conditional click probability :math:`q_i` of the session likelihood in
  :func:`click_model_log_likelihood_from_logits` (same arguments), in item
  order: the held-out click metrics of :mod:`ultr_jax.metrics` score it with
  ``logits=True``, and :math:`\sum_i c_i \log\sigma(z_i) + (1 - c_i)\log\sigma(-z_i)`
  over the valid items is that session log-likelihood.

  Args:
    scores: ``[..., L]`` attraction logits.
    clicks: ``[..., L]`` 0/1 clicks.
    model: one of :data:`CLICK_MODEL_LOSSES`.
    bias: dict of bias logits (:func:`click_model_bias_shapes`); positions beyond a table use its last entry.
    where: ``bool[..., L]`` the valid items (None: all).
    positions: ``int[..., L]`` 0-based display positions (None: the item index).
    satisfaction_scores: ``[..., L]`` satisfaction logits (the models with a ``satisfaction`` item parameter).
    item_scores: ``{name: [..., L]}`` logits of the model's other per-item parameters.

  Returns:
    ``float32[..., L]`` (meaningless where masked).

  >>> z = click_model_click_logits(jnp.zeros(2), jnp.array([1.0, 0.0]), model="dcm",
  ...                              bias={"continuation": jnp.zeros(2)})
  >>> print(1 / (1 + jnp.exp(-z)))  # 1/2, then 1/2 * 1/2 after a click
  [0.5  0.25]
  """
  log_q, log_1mq, _, _, _, inverse = _display_log_probs(
    scores, clicks, model, bias, where, positions, _items(satisfaction_scores, item_scores)
  )
  return _take(log_q - log_1mq, inverse)


@register_loss("click_model", trains=("bias",))
def click_model_loss(
  scores: Array,
  clicks: Array,
  *,
  model: "str | ClickModel",
  bias: dict,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  satisfaction_scores: Optional[Array] = None,
  item_scores: Optional[dict] = None,
  weights: Optional[Array] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> Array:
  r"""Negative session log-likelihood of a click model with a learned attraction (see the module docstring).

  Args:
    scores, clicks, model, bias, where, positions, satisfaction_scores, item_scores: as
      :func:`click_model_log_likelihood_from_logits`.
    weights: optional per-item weights ``[..., L]`` (rax's convention; ``[..., 1]`` weights whole lists): each
      item's term :math:`\log P(c_i \mid c_{<i})` of the session log-likelihood is multiplied by its weight.
    reduce_fn: ``jnp.mean`` over lists with a valid item (rax's
      ``safe_reduce``: all-masked lists are left out), ``jnp.sum``, or None for
      the per-list values.

  Returns:
    scalar (``[...]`` with ``reduce_fn=None``).

  >>> loss = click_model_loss(jnp.zeros((2, 2)), jnp.array([[1.0, 0.0], [0.0, 0.0]]), model="pbm",
  ...                         bias={"examination": jnp.zeros(2)})
  >>> print(round(float(loss), 4))  # -(log(1/4 * 3/4) + 2 log(3/4)) / 2
  1.1247
  """
  log_q, log_1mq, c, display_where, order, _ = _display_log_probs(
    scores, clicks, model, bias, where, positions, _items(satisfaction_scores, item_scores)
  )
  if weights is not None:
    w = _take(jnp.broadcast_to(jnp.asarray(weights, jnp.float32), c.shape), order)
    weigh = lambda x: jnp.where(w == 0, 0.0, w * x)  # a zero weight drops the term, even an impossible one
    log_q, log_1mq = weigh(log_q), weigh(log_1mq)
  ll = bernoulli_log_likelihood(c, log_q, log_1mq, where=display_where)
  return _utils.reduce_lists(-ll, display_where, reduce_fn)
