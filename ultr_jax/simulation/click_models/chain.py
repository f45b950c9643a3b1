r"""Click chains (cascade, DCM, DBN, CCM, SDBN): the machinery they share, in :class:`ChainModel`.

A chain user examines the items in display order and goes on after item ``i`` with probability
:math:`c^0_i` without a click and :math:`c^1_i` after one; each model is its continuations
(:meth:`ChainModel.continuations` from probabilities, :meth:`ChainModel.log_continuations` in log space). From
them the base class gives the exact marginal examination (:meth:`ChainModel.examination`), the sampler
(:meth:`ChainModel.sample_clicks`), the filter of each click's probability given the clicks above
(:meth:`ChainModel.filter_log_probs`, :meth:`ChainModel.conditional_click_prob`) and the session
log-likelihood (:meth:`ChainModel.log_likelihood`).
"""

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax._numerics import log1mexp
from ultr_jax.simulation.click_models.base import (
  ClickModel,
  Session,
  bernoulli_log_likelihood,
  display_order,
  full_mask,
  rank_table,
)
from ultr_jax.types import Array, PRNGKey

__all__ = ["ChainModel", "chain_session", "check_probabilities"]


def chain_session(r, shown, positions, given_positions, c0, c1, top_k) -> Session:
  """A click chain's :class:`Session`, the chain run in order of ``positions``."""
  if given_positions:
    order, inverse = display_order(positions, shown)
    take = lambda x: jnp.take_along_axis(x, order, axis=-1)
    r_s, shown_s = take(r), take(shown)
    c0_s, c1_s = (x if isinstance(x, float) else take(x) for x in (c0, c1))
  else:
    r_s, shown_s, c0_s, c1_s = r, shown, c0, c1
    order = inverse = None
  exam_s = ChainModel.examination(r_s, continue_no_click=c0_s, continue_click=c1_s, where=shown_s)
  sample = lambda key, num_sessions: ChainModel.sample_clicks(
    key, r_s, continue_no_click=c0_s, continue_click=c1_s, where=shown_s, num_sessions=num_sessions
  )
  conditional = lambda c: ChainModel.conditional_click_prob(
    c, r_s, continue_no_click=c0_s, continue_click=c1_s, where=shown_s
  )
  return sequential_session(exam_s, r, shown, sample, conditional, order, inverse, top_k)


def sequential_session(exam_s, r, shown, sample, conditional, order, inverse, top_k) -> Session:
  """A sequential model's :class:`Session` from its display-order examination, sampler and filter."""
  exam = exam_s if inverse is None else jnp.take_along_axis(exam_s, jnp.broadcast_to(inverse, exam_s.shape), axis=-1)
  return Session(exam, exam * r, shown, False, sample, conditional, inverse, order, top_k=top_k)


def check_probabilities(name, value):
  """Probabilities in [0, 1] (a scalar or a sequence), else a ValueError naming the config key."""
  values = np.atleast_1d(np.asarray(value, np.float64))
  if values.size == 0 or np.any(~((values >= 0) & (values <= 1))):
    raise ValueError(f"click_model.{name}: expected probabilities, got {value!r}")
  return tuple(float(v) for v in value) if isinstance(value, (list, tuple)) else float(value)


@dataclasses.dataclass(frozen=True)
class ChainModel(ClickModel):
  """Base of the click chains: the likelihood, predictions and sampler from the continuations."""

  def continuations(self, attraction, **params):
    raise NotImplementedError

  def fitted_continuations(self, a, params):
    """``(c0, c1)`` of the fitted parameters (probabilities; tables by item index, per-item ``[..., L]``).

    Args:
      a: ``[..., L]`` attraction probabilities.
      params: dict name -> probabilities of the model's fitted parameters (per-item ones ``[..., L]``).

    Returns:
      ``(c0, c1)``: the continuation probabilities after no click and after a click, each ``[..., L]``.
    """
    raise NotImplementedError

  def log_continuations(self, log_a, log_1ma, log_bias, ranks, table):
    r"""``(log c0, log c1)`` from log-probabilities (``table(name)``: a bias table per item).

    Args:
      log_a: ``[..., L]`` :math:`\log a`.
      log_1ma: ``[..., L]`` :math:`\log(1 - a)`.
      log_bias: :meth:`ClickModel.log_bias`'s log-probabilities (per-item ones ``[..., L]``).
      ranks: ``int[..., L]`` 0-based ranks indexing the tables, or None (the item index).
      table: ``table(name) -> [..., L]``, the bias table ``name`` read at each item's rank.

    Returns:
      ``(log_c0, log_c1)``, each ``[..., L]``.
    """
    raise NotImplementedError

  def log_probs(self, clicks, log_a, log_1ma, log_bias, *, ranks=None, where=None):
    c = jnp.asarray(clicks, jnp.float32)
    log_a = jnp.broadcast_to(jnp.asarray(log_a, jnp.float32), c.shape)
    log_1ma = jnp.broadcast_to(jnp.asarray(log_1ma, jnp.float32), c.shape)
    where = full_mask(c, where)
    table = lambda name: rank_table(log_bias[name], ranks, c.shape)
    log_c0, log_c1 = self.log_continuations(log_a, log_1ma, log_bias, ranks, table)
    return self.filter_log_probs(
      c, log_a, log_1ma, log_continue_no_click=log_c0, log_continue_click=log_c1, where=where
    )

  def predict(self, clicks, a, params, *, where):
    c0, c1 = self.fitted_continuations(a, params)
    cond = self.conditional_click_prob(clicks, a, continue_no_click=c0, continue_click=c1, where=where)
    marginal = self.examination(a, continue_no_click=c0, continue_click=c1, where=where) * a
    return cond, marginal

  def sample(self, key, a, params, *, where=None, num_sessions=None):
    c0, c1 = self.fitted_continuations(a, params)
    return self.sample_clicks(key, a, continue_no_click=c0, continue_click=c1, where=where, num_sessions=num_sessions)

  # -- the shared machinery (static: any continuations) ------------------------

  @staticmethod
  def examination(
    attraction: Array,
    *,
    continue_no_click: Array | float,
    continue_click: Array | float,
    prior: Optional[Array] = None,
    where: Optional[Array] = None,
  ) -> Array:
    r"""Marginal examination of a click chain: DBN, CCM, DCM and cascade alike.

    Items are scanned in list order. An examined item is clicked with probability :math:`r_j`; the user then
    goes on to the next item with probability :math:`c^1_j` after a click and :math:`c^0_j` without one:

    .. math::
        P(E_i = 1) = \prod_{j < i} \bigl((1 - r_j)\, c^0_j + r_j\, c^1_j\bigr)

    (DBN: :math:`c^0 = \gamma`, :math:`c^1 = \gamma (1 - \sigma_j)`; CCM: :math:`c^0 = \alpha_1`,
    :math:`c^1 = \alpha_2 (1 - r_j) + \alpha_3 r_j`; DCM: :math:`c^0 = 1`, :math:`c^1 = \lambda_j`), in log
    space with an exclusive cumulative sum. Masked items are skipped.

    Args:
      attraction: ``[..., L]`` click probability given examination, in displayed order.
      continue_no_click: :math:`c^0`, the probability of examining the next item after no click, a scalar or
        ``[..., L]``.
      continue_click: :math:`c^1`, the probability after a click, a scalar or ``[..., L]``.
      prior: optional ``[..., L]`` examination ceiling (e.g. 0 beyond top-k); multiplies the result and gates
        the stopping of unshown items.
      where: ``bool[..., L]``.

    Returns:
      ``float32[..., L]`` (0 where masked).

    >>> e = ChainModel.examination(jnp.array([0.5, 0.5, 0.5]), continue_no_click=0.9, continue_click=0.4)
    >>> print([round(float(v), 6) for v in e])
    [1.0, 0.65, 0.4225]
    """
    r = jnp.asarray(attraction, jnp.float32)
    if where is None:
      where = jnp.ones(r.shape, bool)
    gate = where if prior is None else where & (jnp.asarray(prior) > 0)
    keep = (1.0 - r) * jnp.asarray(continue_no_click, jnp.float32) + r * jnp.asarray(continue_click, jnp.float32)
    log_keep = jnp.where(gate, jnp.log(jnp.clip(keep, 0.0, 1.0)), 0.0)  # -inf where keep == 0
    return exclusive_survival(log_keep, where, prior)

  @staticmethod
  def sample_clicks(
    key: PRNGKey,
    attraction: Array,
    *,
    continue_no_click: Array | float,
    continue_click: Array | float,
    where: Optional[Array] = None,
    num_sessions: Optional[int] = None,
  ) -> Array:
    r"""One click-chain session per list, in displayed (array) order.

    The user scans down the list; an examined item is clicked when attractive
    (:math:`A_i \sim \mathrm{Bern}(r_i)`), and the user goes on with probability :math:`c^1_i` after a click,
    :math:`c^0_i` without one. With every draw made at once (:math:`U_i \sim U(0, 1)`), the stop event is
    :math:`T_i = \mathbb{1}[U_i \ge c^{A_i}_i]` and

    .. math::
        E_i = \mathbb{1}\Bigl[\sum_{j<i} T_j = 0\Bigr], \qquad C_i = E_i A_i,

    exact and loop-free: the user leaves at the first stop, found by one ``argmax``.

    Args:
      key: PRNG key.
      attraction: ``[..., L]`` click probability given examination.
      continue_no_click: :math:`c^0`, the probability of examining the next item after no click, a scalar or
        ``[..., L]``.
      continue_click: :math:`c^1`, the probability after a click, a scalar or ``[..., L]``.
      where: ``bool[..., L]`` displayed items (masked items are skipped).
      num_sessions: if set, a leading sessions axis.

    Returns:
      ``float32[..., L]`` clicks (``[S, ..., L]`` with ``num_sessions``).

    >>> c = ChainModel.sample_clicks(jax.random.key(0), jnp.ones(3), continue_no_click=1.0,
    ...                              continue_click=0.0, num_sessions=4)
    >>> print(c.sum(0))  # the cascade: everyone clicks the first item and leaves
    [4. 0. 0.]
    """
    r = jnp.asarray(attraction, jnp.float32)
    shape = r.shape if num_sessions is None else (num_sessions,) + r.shape
    k_a, k_u = jax.random.split(key)
    attracted = jax.random.uniform(k_a, shape) < r
    cont = jnp.where(attracted, jnp.asarray(continue_click, jnp.float32), jnp.asarray(continue_no_click, jnp.float32))
    stop = jax.random.uniform(k_u, shape) >= cont
    if where is not None:
      attracted = attracted & where
      stop = stop & where
    return clicks_to_first_stop(attracted, stop)

  @staticmethod
  def filter_log_probs(
    clicks: Array,
    log_attraction: Array,
    log_no_attraction: Array,
    *,
    log_continue_no_click: Array | float,
    log_continue_click: Array | float,
    where: Optional[Array] = None,
  ) -> tuple[Array, Array]:
    r"""Log conditional click and no-click probabilities of a click chain, from log-space parameters.

    The filter of :meth:`conditional_click_prob` with every input a logarithm (:math:`\log a`,
    :math:`\log(1 - a)`, :math:`\log c^0`, :math:`\log c^1`), so a learner can pass ``log_sigmoid`` of its
    logits and never leave log space:

    .. math::
        \log q_i = \log\epsilon_i + \log a_i, \qquad
        \log\epsilon_{i+1} = \begin{cases} \log c^1_i & c_i = 1 \\
          \log c^0_i + \log\epsilon_i + \log(1 - a_i) - \log(1 - q_i) & c_i = 0 \end{cases}

    Args:
      clicks: ``[..., L]`` 0/1 clicks, in displayed order.
      log_attraction: ``[..., L]`` :math:`\log a`.
      log_no_attraction: ``[..., L]`` :math:`\log(1 - a)`.
      log_continue_no_click: :math:`\log c^0`, a scalar or ``[..., L]``.
      log_continue_click: :math:`\log c^1`, a scalar or ``[..., L]``.
      where: ``bool[..., L]`` (masked items are skipped).

    Returns:
      ``(log_q, log_1mq)``, each ``float32[..., L]`` (:func:`~ultr_jax.simulation.bernoulli_log_likelihood`
      sums them).

    >>> s = jnp.array([0.0, 0.0])  # attraction logits: a = 1/2
    >>> log_q, _ = ChainModel.filter_log_probs(jnp.array([1.0, 0.0]), jax.nn.log_sigmoid(s),
    ...     jax.nn.log_sigmoid(-s), log_continue_no_click=0.0, log_continue_click=jnp.log(0.5))
    >>> print(jnp.exp(log_q))  # the DCM with lambda = 1/2
    [0.5  0.25]
    """
    c = jnp.asarray(clicks, jnp.float32)
    full = lambda x: jnp.broadcast_to(jnp.asarray(x, jnp.float32), c.shape)
    where = full_mask(c, where)

    def step(log_e, x):
      c_i, la, l1a, lc0, lc1, w_i = x
      log_q = log_e + la
      log_1mq = log1mexp(log_q, one_branch=True)
      # The posterior examination of the next item: c1 after a click (the click proves examination), else
      # c0 * P(E_i = 1 | no click) = c0 e (1 - a) / (1 - e a).
      after_skip = lc0 + log_e + l1a - log_1mq
      after_skip = jnp.where(jnp.isneginf(log_e) | jnp.isneginf(l1a), -jnp.inf, after_skip)
      nxt = jnp.minimum(jnp.where(c_i > 0.5, lc1, after_skip), 0.0)  # a probability: rounding stays <= 0
      return jnp.where(w_i, nxt, log_e), (log_q, log_1mq)

    move = lambda x: jnp.moveaxis(x, -1, 0)
    xs = (
      c,
      full(log_attraction),
      full(log_no_attraction),
      full(log_continue_no_click),
      full(log_continue_click),
      where,
    )
    _, (log_q, log_1mq) = jax.lax.scan(step, jnp.zeros(c.shape[:-1], jnp.float32), tuple(map(move, xs)))
    return jnp.moveaxis(log_q, 0, -1), jnp.moveaxis(log_1mq, 0, -1)

  @staticmethod
  def conditional_click_prob(
    clicks: Array,
    attraction: Array,
    *,
    continue_no_click: Array | float,
    continue_click: Array | float,
    where: Optional[Array] = None,
  ) -> Array:
    r"""Conditional click probabilities :math:`P(C_i = 1 \mid c_{<i})` of a click chain.

    With :math:`\epsilon_i = P(E_i = 1 \mid c_{<i})`, the filter

    .. math::
        q_i = \epsilon_i a_i, \qquad \epsilon_1 = 1, \qquad
        \epsilon_{i+1} = \begin{cases} c^1_i & c_i = 1 \\
          c^0_i\,\dfrac{\epsilon_i (1 - a_i)}{1 - \epsilon_i a_i} & c_i = 0 \end{cases}

    run by ``lax.scan`` in log space (:meth:`filter_log_probs`; Chapelle & Zhang WWW'09 for the DBN; Guo et al.
    WSDM'09 for the DCM and WWW'09 for the CCM).

    Args:
      clicks: ``[..., L]`` observed 0/1 clicks, in displayed order.
      attraction: ``[..., L]`` click probability given examination.
      continue_no_click: :math:`c^0`, the probability of examining the next item after no click, a scalar or
        ``[..., L]`` (a model's :class:`~ultr_jax.simulation.ClickChain`).
      continue_click: :math:`c^1`, the probability after a click, a scalar or ``[..., L]``.
      where: ``bool[..., L]`` (masked items are skipped).

    Returns:
      ``float32[..., L]`` (0 where masked).

    >>> # DCM (c0 = 1, c1 = 0.5): after a click at 1 the user is at 2 w.p. 0.5
    >>> q = ChainModel.conditional_click_prob(jnp.array([1.0, 0.0, 0.0]), jnp.full(3, 0.5),
    ...                                       continue_no_click=1.0, continue_click=0.5)
    >>> print([round(float(v), 4) for v in q])  # at 3: P(E_3 | no click at 2) = 0.5 * 0.5 / 0.75
    [0.5, 0.25, 0.1667]
    """
    log_q, _, where = _chain_log_q(clicks, attraction, continue_no_click, continue_click, where)
    return jnp.where(where, jnp.exp(log_q), 0.0)

  @staticmethod
  def log_likelihood(
    clicks: Array,
    attraction: Array,
    *,
    continue_no_click: Array | float,
    continue_click: Array | float,
    where: Optional[Array] = None,
  ) -> Array:
    r"""Session log-likelihood of a click chain: :math:`\sum_i \log P(c_i \mid c_{<i})`.

    See :meth:`conditional_click_prob`; computed from :math:`\log q` and :math:`\log(1 - q)` without leaving
    log space.

    Args:
      clicks: ``[..., L]`` observed 0/1 clicks, in displayed order.
      attraction: ``[..., L]`` click probability given examination.
      continue_no_click: :math:`c^0`, the probability of examining the next item after no click, a scalar or
        ``[..., L]``.
      continue_click: :math:`c^1`, the probability after a click, a scalar or ``[..., L]``.
      where: ``bool[..., L]`` (masked items are skipped).

    Returns:
      ``float32[...]`` log-likelihood per session (0 for a fully masked list).

    >>> # the cascade: a click at 2 means no click at 1, then nothing can follow
    >>> ll = ChainModel.log_likelihood(jnp.array([0.0, 1.0, 0.0]), jnp.full(3, 0.5),
    ...                                continue_no_click=1.0, continue_click=0.0)
    >>> print(round(float(ll), 6), round(float(jnp.log(0.25)), 6))
    -1.386294 -1.386294
    """
    log_q, log_1mq, where = _chain_log_q(clicks, attraction, continue_no_click, continue_click, where)
    return bernoulli_log_likelihood(clicks, log_q, log_1mq, where=where)


def safe_log(p: Array) -> Array:
  """``log`` of a probability, clipped to [0, 1] first (-inf at 0)."""
  return jnp.log(jnp.clip(p, 0.0, 1.0))


def _chain_log_q(clicks, attraction, c0, c1, where):
  """Log conditional click / no-click probabilities of a click chain from probabilities."""
  c = jnp.asarray(clicks, jnp.float32)
  a = jnp.broadcast_to(jnp.asarray(attraction, jnp.float32), c.shape)
  where = full_mask(c, where)
  log_q, log_1mq = ChainModel.filter_log_probs(
    c,
    safe_log(a),
    safe_log(1.0 - a),
    log_continue_no_click=safe_log(jnp.asarray(c0, jnp.float32)),
    log_continue_click=safe_log(jnp.asarray(c1, jnp.float32)),
    where=where,
  )
  return log_q, log_1mq, where


def exclusive_survival(log_keep: Array, where: Array, prior: Optional[Array]) -> Array:
  r""":math:`\prod_{j<i} k_j` from :math:`\log k` by an exclusive cumulative sum (times ``prior``; 0 where masked)."""
  csum = jnp.cumsum(log_keep, axis=-1)
  exclusive = jnp.concatenate([jnp.zeros_like(csum[..., :1]), csum[..., :-1]], axis=-1)
  exam = jnp.exp(exclusive)
  if prior is not None:
    exam = exam * prior
  return jnp.where(where, exam, 0.0)


def clicks_to_first_stop(attracted: Array, stop: Array) -> Array:
  """The clicks of a session that leaves at its first stop: the attracted items up to and including it
  (``argmax`` finds it in one reduction, cheaper than a cumsum, which XLA lowers to a reduce-window on CPU)."""
  list_size = attracted.shape[-1]
  first_stop = jnp.where(jnp.any(stop, axis=-1), jnp.argmax(stop, axis=-1), list_size)
  return (attracted & (jnp.arange(list_size) <= first_stop[..., None])).astype(jnp.float32)
