r"""A weighted mixture of registered click models: each session comes from component :math:`m` w.p. :math:`w_m`.

.. math::
    P(c_{1:L}) = \sum_m w_m P_m(c_{1:L}), \qquad
    P(C_i = 1 \mid c_{<i}) = \frac{\sum_m w_m P_m(c_{<i})\, P_m(C_i = 1 \mid c_{<i})}{\sum_m w_m P_m(c_{<i})},

the conditional click probability filtered by the posterior over components given the clicks above (a
latent user type, as in the mixture click models of Chuklin, Markov & de Rijke, *Click Models for Web Search*,
2015). Fitted: the components share the per-document parameters (``attraction``, and ``satisfaction`` when a
component has one), each keeps its bias logits under ``c<m>.<name>``, and the weights are
:math:`\mathrm{softmax}` of the logits ``weights[M]``.
"""

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax.simulation.click_models.base import (
  ClickModel,
  Parameter,
  Session,
  SessionChecker,
  display_order,
  freeze,
  full_mask,
  get_click_model,
  prepare,
  thaw,
)
from ultr_jax.types import Array, PRNGKey

__all__ = ["mixture", "Mixture"]


def _exclusive_cumsum(x):
  return jnp.concatenate([jnp.zeros_like(x[..., :1]), jnp.cumsum(x, axis=-1)[..., :-1]], axis=-1)


def mixture(
  key: PRNGKey,
  attraction: Array,
  *,
  components=({"name": "pbm"}, {"name": "dcm"}),
  weights=None,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Sessions of a mixture of click models: each session draws its component with probability :math:`w_m`.

  .. math::
      P(E_i = 1) = \sum_m w_m P_m(E_i = 1), \qquad P(C_i = 1) = \sum_m w_m P_m(C_i = 1)

  and ``conditional_click_prob`` is the posterior-weighted filter of :meth:`Mixture.filter_log_probs`.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination (shared by the components).
    components: the components' simulation configs (``{"name": ..., <its keys>}``, no batch inputs).
    weights: ``[M]`` mixture weights (normalised; default uniform).
    where: ``bool[..., L]`` valid items (default all); masked items never click.
    positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
    top_k: display cut-off (``shown`` is returned); None: every valid item is shown.
    num_sessions: if set, a leading axis of that many independent sessions.
    num_impressions: if set, aggregated mode: ``clicks`` are CTRs over that many impressions of each item's
      marginal click probability.

  Returns:
    dict as the other samplers (see :mod:`ultr_jax.simulation.click_models`).

  >>> out = mixture(jax.random.key(0), jnp.full(3, 0.5), components=({"name": "cascade"}, {"name": "dcm",
  ...               "continuation": 1.0}), weights=(0.5, 0.5))
  >>> print(out["click_prob"])  # (cascade + always continue) / 2
  [0.5    0.375  0.3125]
  """
  kwargs = Mixture().simulation_kwargs({"components": components, **({} if weights is None else {"weights": weights})})
  session = Mixture().session(attraction, where=where, positions=positions, top_k=top_k, **kwargs)
  return session.output(key, num_sessions, num_impressions)


@dataclasses.dataclass(frozen=True)
class Mixture(ClickModel):
  r"""A mixture of registered click models (``components``, names; default PBM and DCM).

  >>> m = Mixture(("pbm", "dbn"))
  >>> m.item_params, sorted(m.bias_shapes(2))
  (('satisfaction',), ['c0.examination', 'c1.perseverance', 'weights'])
  """

  components: tuple = ("pbm", "dcm")

  name = "mixture"
  config_keys = {"components": None, "weights": None}
  #: The weights and each component's bias tables (``bias_shapes`` reads them off the components; the
  #: per-document parameters are shared).
  parameters = {
    "weights": Parameter(("M",), r"mixture weights :math:`w_m` (a softmax of the logits, not sigmoids)"),
    "c<m>.<name>": Parameter((), "component :math:`m`'s bias parameter ``<name>`` (its own table)"),
  }

  def __post_init__(self):
    models = tuple(get_click_model(c) for c in self.components)
    if len(models) < 2 or not all(m.fittable for m in models):
      raise ValueError(f"mixture: needs two or more fittable components, got {self.components}")

  @property
  def models(self) -> tuple:
    return tuple(get_click_model(c) for c in self.components)

  @property
  def item_params(self) -> tuple:
    return tuple(dict.fromkeys(p for m in self.models for p in m.item_params))

  # -- simulation

  def simulation_kwargs(self, cfg):
    """The mixture's :meth:`session` keyword arguments: each component's model and its own keyword
    arguments, and the normalised ``weights``.

    Args:
      cfg: the (checked) simulation config, a mapping (None values: not set, the default applies).

    Returns:
      ``{"components": ((model, kwargs), ...), "weights": (w_1, ...)}`` (kwargs as sorted frozen pairs).

    Raises:
      ValueError: for a component key its model does not declare, a component reading batch inputs, or weights that are not
        one non-negative value per component with a positive sum.
    """
    comps = cfg.get("components") or tuple({"name": c} for c in self.components)
    parts = []
    for comp in comps:
      to_dict = getattr(comp, "to_dict", None)  # a ConfigDict
      comp = dict(to_dict() if to_dict is not None else comp)
      if comp.get("name") is None:
        raise ValueError(f"mixture: component {comp} has no 'name'")
      model = get_click_model(comp["name"])
      unknown = sorted(set(comp) - {"name"} - set(model.config_keys))
      if unknown or model.batch_inputs:
        raise ValueError(
          f"click_model.components: unknown keys {unknown} for model {model.name!r} (known: "
          f"{sorted(model.config_keys)}), or a model reading batch inputs {model.batch_inputs}"
        )
      kwargs = model.simulation_kwargs(comp)
      parts.append((model, tuple(sorted((k, freeze(v)) for k, v in kwargs.items()))))
    weights = np.asarray(cfg.get("weights", np.ones(len(parts))), np.float64)
    if weights.shape != (len(parts),) or np.any(weights < 0) or weights.sum() <= 0:
      raise ValueError(f"click_model.weights: expected {len(parts)} non-negative weights, got {weights.tolist()}")
    return {"components": tuple(parts), "weights": tuple(float(w) for w in weights / weights.sum())}

  def session(self, attraction, *, where=None, positions=None, top_k=None, components=None, weights=None):
    """The mixture's ``Session``: each session drawn from one
    component, chosen with probability ``weights``.

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      components: ``((model, kwargs), ...)`` pairs of a :class:`ClickModel` and its :meth:`session` keyword
        arguments as sorted ``(name, frozen value)`` tuples (:meth:`simulation_kwargs`); None: the defaults of
        the model's ``components``.
      weights: the components' probabilities, summing to 1 (used only with ``components``).

    Returns:
      The ``Session``.
    """
    if components is None:
      kw = self.simulation_kwargs({})
      components, weights = kw["components"], kw["weights"]
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    sessions = [
      m.session(r, where=where, positions=positions, top_k=top_k, **{k: thaw(v) for k, v in kw}) for m, kw in components
    ]
    w = jnp.asarray(weights, jnp.float32)
    marg = [s.marginals() for s in sessions]
    exam = functools.reduce(jnp.add, [w[i] * e for i, (e, _) in enumerate(marg)])
    click_prob = functools.reduce(jnp.add, [w[i] * p for i, (_, p) in enumerate(marg)])
    order, _ = display_order(positions, shown)

    def sample(key, num_sessions):
      keys = jax.random.split(key, len(sessions) + 1)
      clicks = [s.sample(k, num_sessions) for s, k in zip(sessions, keys[1:])]
      z = jax.random.categorical(keys[0], jnp.log(w), shape=clicks[0].shape[:-1])
      return sum(jnp.where((z == i)[..., None], c, 0.0) for i, c in enumerate(clicks))

    def conditional(clicks):
      q = jnp.stack([jnp.broadcast_to(s.conditional(clicks), jnp.shape(clicks)) for s in sessions])
      log_q, _ = self.filter_log_probs(jnp.log(w), jnp.log(q), jnp.log1p(-q), clicks, where=shown, order=order)
      return jnp.where(shown, jnp.exp(log_q), 0.0)

    return Session(exam, click_prob, shown, False, sample, conditional, top_k=top_k)

  # -- fitted

  def _sub(self, params, i):
    """Component ``i``'s parameters: its prefixed ones, and the shared per-document ones."""
    prefix = f"c{i}."
    own = {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}
    shared = {k: v for k, v in params.items() if "." not in k and k != "weights"}
    return {**shared, **own}

  def bias_shapes(self, num_ranks):
    shapes = {"weights": (len(self.components),)}
    for i, m in enumerate(self.models):
      shapes.update({f"c{i}.{k}": s for k, s in m.bias_shapes(num_ranks).items()})
    return shapes

  def log_bias(self, bias_logits, items=None):
    out = {"weights": jax.nn.log_softmax(jnp.asarray(bias_logits["weights"], jnp.float32))}
    for i, m in enumerate(self.models):
      out.update({f"c{i}.{k}": v for k, v in m.log_bias(self._sub(bias_logits, i), items).items()})
    return out

  def log_probs(self, clicks, log_a, log_1ma, log_bias, *, ranks=None, where=None):
    parts = [
      m.log_probs(clicks, log_a, log_1ma, self._sub(log_bias, i), ranks=ranks, where=where)
      for i, m in enumerate(self.models)
    ]
    shape = jnp.broadcast_shapes(*(p[0].shape for p in parts))
    log_q = jnp.stack([jnp.broadcast_to(p[0], shape) for p in parts])
    log_1mq = jnp.stack([jnp.broadcast_to(p[1], shape) for p in parts])
    return self.filter_log_probs(log_bias["weights"], log_q, log_1mq, clicks, where=where)

  def predict(self, clicks, a, params, *, where):
    parts = [m.predict(clicks, a, self._sub(params, i), where=where) for i, m in enumerate(self.models)]
    w = jnp.asarray(params["weights"], jnp.float32)
    marginal = sum(w[i] * jnp.where(where, p[1], 0.0) for i, p in enumerate(parts))
    q = jnp.stack([jnp.broadcast_to(p[0], jnp.shape(a)) for p in parts])
    log_q, _ = self.filter_log_probs(jnp.log(w), jnp.log(q), jnp.log1p(-q), clicks, where=where)
    return jnp.exp(log_q), marginal

  def sample(self, key, a, params, *, where=None, num_sessions=None):
    keys = jax.random.split(key, len(self.components) + 1)
    clicks = [
      m.sample(k, a, self._sub(params, i), where=where, num_sessions=num_sessions)
      for i, (m, k) in enumerate(zip(self.models, keys[1:]))
    ]
    w = jnp.asarray(params["weights"], jnp.float32)
    z = jax.random.categorical(keys[0], jnp.log(w), shape=clicks[0].shape[:-1])
    return sum(jnp.where((z == i)[..., None], c, 0.0) for i, c in enumerate(clicks))

  def to_probabilities(self, logits):
    out = super().to_probabilities({k: v for k, v in logits.items() if k != "weights"})
    return {**out, "weights": jax.nn.softmax(jnp.asarray(logits["weights"], jnp.float32))}

  def to_logits(self, params):
    out = super().to_logits({k: v for k, v in params.items() if k != "weights"})
    return {**out, "weights": jnp.log(jnp.asarray(params["weights"], jnp.float32))}

  def check_sessions(self, clicks, where) -> None:
    """Raises ValueError unless one of the components explains every session.

    Args:
      clicks: ``[B, L]`` 0/1 clicks.
      where: ``bool[B, L]`` valid items.

    Raises:
      ValueError: listing each component's error when none explains the log.
    """
    errors = []
    for m in self.models:
      if not isinstance(m, SessionChecker):
        return  # explains every click pattern
      try:
        m.check_sessions(clicks, where)
        return
      except ValueError as e:
        errors.append(str(e))
    raise ValueError(f"mixture: no component explains the log: {errors}")

  @staticmethod
  def filter_log_probs(
    log_weights: Array, log_q: Array, log_1mq: Array, clicks: Array, *, where: Optional[Array] = None, order=None
  ) -> tuple[Array, Array]:
    r"""The mixture's :math:`(\log q_i, \log(1 - q_i))` from its components' (each ``[M, ..., L]``).

    .. math::
        \log q_i = \operatorname{logsumexp}_m\bigl(\log w_m + \ell_{m,<i} + \log q_{m,i}\bigr)
          - \operatorname{logsumexp}_m\bigl(\log w_m + \ell_{m,<i}\bigr), \qquad
        \ell_{m,<i} = \sum_{j<i} \log P_m(c_j \mid c_{<j})

    Args:
      log_weights: ``[M]`` :math:`\log w`.
      log_q: ``[M, ..., L]`` each component's :math:`\log q_{m,i}`.
      log_1mq: ``[M, ..., L]`` each component's :math:`\log(1 - q_{m,i})`.
      clicks: ``[..., L]`` 0/1 clicks.
      where: ``bool[..., L]``.
      order: ``int[..., L]`` the permutation from array order to display order (the prefix sums run in display
        order); None: the items are in display order.

    Returns:
      ``(log_q, log_1mq)``, each ``float32[..., L]``.

    >>> lq = jnp.log(jnp.array([[0.5, 0.5], [0.1, 0.1]]))
    >>> c = jnp.array([1.0, 0.0])
    >>> q, _ = Mixture.filter_log_probs(jnp.log(jnp.array([0.5, 0.5])), lq, jnp.log1p(-jnp.exp(lq)), c)
    >>> print([round(float(v), 4) for v in jnp.exp(q)])  # 0.3, then (.5 * .5 * .5 + .5 * .1 * .1) / (.5 * .5 + .5 * .1)
    [0.3, 0.4333]
    """
    c = jnp.asarray(clicks, jnp.float32)
    shape = log_q.shape
    c = jnp.broadcast_to(c, shape)
    where = jnp.broadcast_to(full_mask(c[0], where), shape)
    term = jnp.where(where, jnp.where(c > 0.5, log_q, log_1mq), 0.0)
    if order is None:
      prefix = _exclusive_cumsum(term)
    else:
      order = jnp.broadcast_to(order, shape)
      inverse = jnp.argsort(order, axis=-1, stable=True)
      prefix = jnp.take_along_axis(_exclusive_cumsum(jnp.take_along_axis(term, order, axis=-1)), inverse, axis=-1)
    log_post = jnp.reshape(log_weights, (-1,) + (1,) * (len(shape) - 1)) + prefix
    log_norm = jax.nn.logsumexp(log_post, axis=0)
    possible = jnp.isfinite(log_norm)  # after an observation no component explains, the session is at -inf already
    norm = jnp.where(possible, log_norm, 0.0)
    out_q = jnp.where(possible, jax.nn.logsumexp(log_post + log_q, axis=0) - norm, 0.0)
    out_1mq = jnp.where(possible, jax.nn.logsumexp(log_post + log_1mq, axis=0) - norm, 0.0)
    return jnp.minimum(out_q, 0.0), jnp.minimum(out_1mq, 0.0)
