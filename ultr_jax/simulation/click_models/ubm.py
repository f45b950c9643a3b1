r"""The user browsing model (Dupret & Piwowarski, SIGIR'08): examination by rank and last-click distance."""

import dataclasses
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax._numerics import log1mexp
from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models.base import (
  ClickModel,
  Parameter,
  bernoulli_log_likelihood,
  display_order,
  full_mask,
  item_log_likelihood,
  prepare,
)
from ultr_jax.simulation.click_models.chain import safe_log, sequential_session
from ultr_jax.simulation.click_models.pbm import table_kwargs
from ultr_jax.simulation.click_models.statistics import ItemCounter, item_statistics
from ultr_jax.types import Array, PRNGKey

__all__ = ["ubm", "UBM"]


def ubm(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  gamma: Optional[Array] = None,
  eta: float = 1.0,
  table: Sequence[float] = P.ULTRA_EXAM_TABLE,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""User browsing model (Dupret & Piwowarski SIGIR'08): examination by rank and last-click distance.

  .. math::
      P(E_i = 1 \mid r'_i) = \gamma_{r_i,\, r_i - r'_i}, \qquad C_i = E_i A_i,\quad
      A_i \sim \mathrm{Bern}(a_i)

  with :math:`r'_i` the rank of the last click above item ``i`` (0 if none).
  ``examination`` is the exact marginal over click histories
  (:meth:`UBM.examination`), the oracle propensity an
  IPS learner would use; ``click_prob`` is ``examination * attraction``.
  Items are examined in order of ``positions``; items beyond ``top_k`` or
  masked are skipped (they break no distance: the rank is the position).

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default ``arange(L)``).
    gamma: ``[K, K + 1]`` examination table (rank, last-click state);
      default :meth:`UBM.gamma_table` of ``table`` and
      ``eta`` over ``L`` ranks (the PBM table before any click).
    eta: the default table's power.
    table: the default table's per-distance examination probabilities :math:`v`.
    top_k: display cut-off.
    num_sessions: leading sessions axis.
    num_impressions: aggregated CTR mode (marginal click probabilities).

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see :mod:`ultr_jax.simulation.click_models`.

  >>> out = ubm(jax.random.key(0), jnp.array([0.0, 0.0, 0.0]))  # no clicks: the PBM table
  >>> print(out["examination"])
  [0.68 0.61 0.48]
  """
  session = UBM().session(attraction, where=where, positions=positions, top_k=top_k, gamma=gamma, eta=eta, table=table)
  return session.output(key, num_sessions, num_impressions)


@dataclasses.dataclass(frozen=True)
class UBM(ClickModel):
  r"""The UBM (config ``gamma``, a ``[K, K + 1]`` table, or ``eta`` and ``table``; fitted: a ``gamma[L, L + 1]``
  logit per rank and last-click state, :math:`q_i = \sigma(\gamma_{r_i, l_i})\,a_i`).

  >>> UBM().bias_shapes(2)
  {'gamma': (2, 3)}
  """

  name = "ubm"
  config_keys = {"eta": 1.0, "table": P.ULTRA_EXAM_TABLE, "gamma": None}
  parameters = {
    "gamma": Parameter(
      ("L", "L + 1"),
      r"examination :math:`\gamma_{r, l}` at rank :math:`r` with the last click at state :math:`l` "
      r"(0: none; :math:`j + 1`: rank :math:`j`; the layout of :meth:`UBM.gamma_table`)",
    ),
  }
  propensity_table = "gamma"

  def simulation_kwargs(self, cfg):
    """The UBM's :meth:`session` keyword arguments: ``eta``, ``table`` and, when set, ``gamma``.

    Args:
      cfg: the (checked) simulation config, a mapping (None values: not set, the default applies).

    Returns:
      dict with ``eta`` (default 1.0) and, when set, ``table`` and ``gamma`` (a ``float32[K, K + 1]`` array).

    Raises:
      ValueError: if ``gamma`` is not a ``[K, K + 1]`` table of probabilities.
    """
    kwargs = table_kwargs(cfg)
    if "gamma" in cfg:
      gamma = np.asarray(cfg["gamma"], np.float32)
      if gamma.ndim != 2 or gamma.shape[1] != gamma.shape[0] + 1 or np.any((gamma < 0) | (gamma > 1)):
        raise ValueError(f"click_model.gamma: expected a [K, K + 1] table of probabilities, got shape {gamma.shape}")
      kwargs["gamma"] = gamma
    return kwargs

  def session(
    self, attraction, *, where=None, positions=None, top_k=None, gamma=None, eta=1.0, table=P.ULTRA_EXAM_TABLE
  ):
    """The UBM's ``Session`` (:func:`ubm`).

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      gamma: ``[K, K + 1]`` examination table (rank, last-click state); None: :meth:`gamma_table` of ``table``
        and ``eta`` over ``L`` ranks.
      eta: power of the default table.
      table: per-distance examination probabilities :math:`v` of the default table.

    Returns:
      The ``Session``.
    """
    given_positions = positions is not None
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    g = jnp.asarray(self.gamma_table(r.shape[-1], eta=eta, table=table) if gamma is None else gamma, jnp.float32)
    if given_positions:
      order, inverse = display_order(positions, shown)
      take = lambda x, idx: jnp.take_along_axis(x, idx, axis=-1)
      r_s, shown_s, ranks_s = take(r, order), take(shown, order), take(positions, order)
    else:
      r_s, shown_s, ranks_s, order, inverse = r, shown, positions, None, None
    exam_s = self.examination(r_s, g, ranks=ranks_s, where=shown_s)
    sample = lambda key, num_sessions: self.sample_clicks(
      key, r_s, g, ranks=ranks_s, where=shown_s, num_sessions=num_sessions
    )
    conditional = lambda c: self.conditional_click_prob(c, r_s, g, ranks=ranks_s, where=shown_s)
    return sequential_session(exam_s, r, shown, sample, conditional, order, inverse, top_k)

  def log_probs(self, clicks, log_a, log_1ma, log_bias, *, ranks=None, where=None):
    c = jnp.asarray(clicks, jnp.float32)
    log_a = jnp.broadcast_to(jnp.asarray(log_a, jnp.float32), c.shape)
    return self.filter_log_probs(c, log_a, log_bias["gamma"], ranks=ranks, where=full_mask(c, where))

  statistics_kind = "ubm_items"

  def sufficient_statistics(self, doc_ids, clicks, where=None):
    """Impressions and clicks per (document, rank, last-click state).

    Args:
      doc_ids: ``int[B, L]`` document ids, in displayed order.
      clicks: ``[B, L]`` 0/1 clicks.
      where: ``bool[B, L]`` valid items (None: all).

    Returns:
      A :class:`~ultr_jax.simulation.ClickStatistics` of kind ``"items"`` with keys (document, rank,
      last-click state).
    """
    return item_statistics(doc_ids, clicks, where, last_click_state=True)

  def statistics_accumulator(self):
    return ItemCounter(last_click_state=True)

  def statistics_bias_index(self, bias, keys):
    """A record (document, rank, last-click state) reads :math:`\\gamma` at its (rank, state) alone.

    >>> UBM().statistics_bias_index({"gamma": jnp.zeros((3, 4))}, jnp.array([[7, 0, 0], [7, 2, 1]])).tolist()
    [0, 9]
    """
    k, s = bias["gamma"].shape
    rank = jnp.clip(jnp.asarray(keys[:, 1], jnp.int32), 0, k - 1)
    return rank * s + jnp.clip(jnp.asarray(keys[:, 2], jnp.int32), 0, s - 1)

  def statistics_log_likelihood(self, logits, keys, counts):
    log_a, _, log_bias = self._gathered_logs(logits, keys[:, 0])
    k, s = log_bias["gamma"].shape
    log_q = log_bias["gamma"][jnp.clip(keys[:, 1], 0, k - 1), jnp.clip(keys[:, 2], 0, s - 1)] + log_a
    return item_log_likelihood(log_q, log1mexp(log_q, one_branch=True), counts)

  def predict(self, clicks, a, params, *, where):
    cond = self.conditional_click_prob(clicks, a, params["gamma"], where=where)
    marginal = self.examination(a, params["gamma"], where=where) * a
    return cond, marginal

  def sample(self, key, a, params, *, where=None, num_sessions=None):
    return self.sample_clicks(key, a, params["gamma"], where=where, num_sessions=num_sessions)

  # -- the UBM's own math (static: any gamma table) ----------------------------

  @staticmethod
  def gamma_table(num_positions: int, *, eta: float = 1.0, table: Sequence[float] = P.ULTRA_EXAM_TABLE) -> np.ndarray:
    r"""The UBM examination table :math:`\gamma_{r,d}` in its distance form, ``[K, K + 1]``.

    Dupret & Piwowarski (SIGIR'08) let examination depend on the rank :math:`r` and the distance
    :math:`d = r - r'` to the last clicked rank :math:`r'` (:math:`r' = 0` without a click). This default reads
    the distance off the PBM table,

    .. math::
        \gamma_{r,d} = v_{\min(d, |v|) - 1}^{\,\eta}

    so before any click it is the PBM of :meth:`~ultr_jax.simulation.PBMTable.examination`, and just below a
    click it restarts at :math:`v_0`. Row ``p`` (0-based rank) and column ``last`` (0 = no click yet, ``j + 1``
    = last click at rank ``j``) hold :math:`\gamma_{p+1,\,p+1-\mathrm{last}}`; entries with ``last > p`` cannot
    occur and are 0.

    Args:
      num_positions: ranks ``K``.
      eta: the power of the table.
      table: per-distance examination probabilities :math:`v`.

    Returns:
      ``float32[K, K + 1]``.

    >>> print(UBM.gamma_table(3))
    [[0.68 0.   0.   0.  ]
     [0.61 0.68 0.   0.  ]
     [0.48 0.61 0.68 0.  ]]
    """
    v = np.asarray(table, np.float64)
    p = np.arange(num_positions)[:, None]
    last = np.arange(num_positions + 1)[None, :]
    dist = p + 1 - last  # d = r - r', >= 1 where possible
    g = v[np.clip(dist, 1, len(v)) - 1] ** eta
    return np.where(dist >= 1, g, 0.0).astype(np.float32)

  @staticmethod
  def examination(
    attraction: Array, gamma: Array, *, ranks: Optional[Array] = None, where: Optional[Array] = None
  ) -> Array:
    r"""Marginal examination of the UBM, items in displayed order.

    With :math:`\pi_j(l)` the probability that, before the ``j``-th displayed item, the last click was at
    state ``l`` (0 = none, ``i + 1`` = rank ``i``),

    .. math::
        P(E_j = 1) = \sum_l \pi_j(l)\,\gamma[r_j, l], \qquad
        \pi_{j+1}(l) = \pi_j(l)\bigl(1 - \gamma[r_j, l]\,a_j\bigr)
          + \mathbb{1}[l = r_j + 1] \sum_{l'} \pi_j(l')\,\gamma[r_j, l']\,a_j

    one ``lax.scan`` step per displayed item over a state of ``L + 1`` probabilities (exact; no sampling).
    Masked items are skipped.

    Args:
      attraction: ``[..., L]`` click probability given examination, in displayed order.
      gamma: ``[K, K + 1]`` table (:meth:`gamma_table`); ranks and states beyond it are clipped to its last row
        and column.
      ranks: ``int[..., L]`` 0-based ranks of the items (increasing along the list; default ``arange(L)``).
      where: ``bool[..., L]``.

    Returns:
      ``float32[..., L]`` (0 where masked).

    >>> g = jnp.asarray(UBM.gamma_table(3))
    >>> # rank 2: no click yet w.p. 0.32 (then 0.61), a click at rank 1 w.p. 0.68 (then 0.68)
    >>> print(np.asarray(UBM.examination(jnp.array([1.0, 1.0, 1.0]), g)).round(4))
    [0.68   0.6576 0.6398]
    """
    a = jnp.asarray(attraction, jnp.float32)
    gamma = jnp.asarray(gamma, jnp.float32)
    num_lists_shape, length = a.shape[:-1], a.shape[-1]
    where = jnp.ones(a.shape, bool) if where is None else jnp.asarray(where, bool)
    ranks = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32) if ranks is None else jnp.asarray(ranks), a.shape)
    k = gamma.shape[0]
    states = jnp.clip(jnp.arange(length + 1), 0, gamma.shape[1] - 1)

    def step(state, x):
      a_j, shown_j, r_j = x
      g = jnp.take(gamma[jnp.clip(r_j, 0, k - 1)], states, axis=-1)  # [..., L + 1]
      g = jnp.where(shown_j[..., None], g, 0.0)
      exam = jnp.sum(state * g, axis=-1)
      moved = state * g * a_j[..., None]
      nxt = jnp.clip(r_j + 1, 0, length)
      state = state - moved + jax.nn.one_hot(nxt, length + 1, dtype=state.dtype) * jnp.sum(moved, -1, keepdims=True)
      return state, exam

    init = jnp.broadcast_to(jax.nn.one_hot(0, length + 1, dtype=jnp.float32), num_lists_shape + (length + 1,))
    xs = tuple(jnp.moveaxis(x, -1, 0) for x in (a, where, ranks))
    _, exam = jax.lax.scan(step, init, xs)
    return jnp.where(where, jnp.moveaxis(exam, 0, -1), 0.0)

  @staticmethod
  def sample_clicks(
    key: PRNGKey,
    attraction: Array,
    gamma: Array,
    *,
    ranks: Optional[Array] = None,
    where: Optional[Array] = None,
    num_sessions: Optional[int] = None,
  ) -> Array:
    r"""UBM sessions, items in displayed order.

    The user scans down the list; item ``j`` at rank :math:`r_j` is examined with probability
    :math:`\gamma[r_j, l]`, where ``l`` is the state of the last click (0 = none, ``i + 1`` = rank ``i``), and
    clicked with probability :math:`a_j` once examined:

    .. math::
        C_j = \mathbb{1}[U_j < \gamma[r_j, l_j]\, a_j], \qquad U_j \sim U(0, 1)

    One ``lax.scan`` step per displayed item carries the last-click state of every session and list; the
    uniforms are drawn at once.

    Args:
      key: PRNG key.
      attraction: ``[..., L]`` click probability given examination.
      gamma: ``[K, K + 1]`` examination table (:meth:`gamma_table`).
      ranks: ``int[..., L]`` 0-based ranks (default ``arange(L)``).
      where: ``bool[..., L]`` displayed items (masked items are skipped).
      num_sessions: if set, a leading sessions axis.

    Returns:
      ``float32[..., L]`` clicks (``[S, ..., L]`` with ``num_sessions``).

    >>> g = jnp.asarray(UBM.gamma_table(2))
    >>> c = UBM.sample_clicks(jax.random.key(0), jnp.ones(2), g, num_sessions=20000)
    >>> print(np.asarray(c.mean(0)).round(2))  # 0.68, then 0.32 * 0.61 + 0.68 * 0.68 = 0.6576
    [0.68 0.66]
    """
    a = jnp.asarray(attraction, jnp.float32)
    gamma = jnp.asarray(gamma, jnp.float32)
    shape = a.shape if num_sessions is None else (num_sessions,) + a.shape
    length = a.shape[-1]
    where = jnp.ones(a.shape, bool) if where is None else jnp.asarray(where, bool)
    ranks = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32) if ranks is None else jnp.asarray(ranks), a.shape)
    u = jax.random.uniform(key, shape)
    k, s = gamma.shape[0], gamma.shape[1]

    def step(last, x):
      u_j, a_j, shown_j, r_j = x
      exam = gamma[jnp.clip(r_j, 0, k - 1), jnp.clip(last, 0, s - 1)]
      click = shown_j & (u_j < exam * a_j)
      return jnp.where(click, r_j + 1, last), click

    move = lambda x: jnp.moveaxis(jnp.broadcast_to(x, shape), -1, 0)
    _, clicks = jax.lax.scan(step, jnp.zeros(shape[:-1], jnp.int32), (move(u), move(a), move(where), move(ranks)))
    return jnp.moveaxis(clicks, 0, -1).astype(jnp.float32)

  @staticmethod
  def filter_log_probs(
    clicks: Array,
    log_attraction: Array,
    log_gamma: Array,
    *,
    ranks: Optional[Array] = None,
    where: Optional[Array] = None,
  ) -> tuple[Array, Array]:
    r"""Log conditional click and no-click probabilities of the UBM, from log-space parameters.

    :math:`\log q_i = \log\gamma[r_i, l_i] + \log a_i` (see :meth:`conditional_click_prob`), for learners that
    hold logits.

    Args:
      clicks: ``[..., L]`` 0/1 clicks, in displayed order.
      log_attraction: ``[..., L]`` :math:`\log a`.
      log_gamma: ``[K, K + 1]`` :math:`\log\gamma` (ranks and states beyond it are clipped to its last row and
        column).
      ranks: ``int[..., L]`` 0-based ranks (default ``arange(L)``).
      where: ``bool[..., L]``.

    Returns:
      ``(log_q, log_1mq)``, each ``float32[..., L]``.

    >>> log_q, _ = UBM.filter_log_probs(jnp.array([1.0, 0.0]), jnp.zeros(2),
    ...                                 jnp.log(jnp.array([[0.9, 0.], [0.3, 0.8]])))
    >>> print(jnp.exp(log_q))  # rank 2 below a click at rank 1: gamma[1, 1]
    [0.9 0.8]
    """
    c = jnp.asarray(clicks, jnp.float32)
    log_a = jnp.broadcast_to(jnp.asarray(log_attraction, jnp.float32), c.shape)
    log_gamma = jnp.asarray(log_gamma, jnp.float32)
    where = full_mask(c, where)
    length = c.shape[-1]
    ranks = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32) if ranks is None else jnp.asarray(ranks), c.shape)
    # The last-click state above each item: 0 = none, rank + 1 of the last click (exclusive cummax).
    state = jnp.where(where & (c > 0.5), ranks + 1, 0)
    state = jax.lax.cummax(state, axis=c.ndim - 1)
    state = jnp.concatenate([jnp.zeros_like(state[..., :1]), state[..., :-1]], axis=-1)
    k, s = log_gamma.shape
    log_q = log_gamma[jnp.clip(ranks, 0, k - 1), jnp.clip(state, 0, s - 1)] + log_a
    return log_q, log1mexp(log_q, one_branch=True)

  @staticmethod
  def conditional_click_prob(
    clicks: Array, attraction: Array, gamma: Array, *, ranks: Optional[Array] = None, where: Optional[Array] = None
  ) -> Array:
    r"""Conditional click probabilities of the UBM (Dupret & Piwowarski SIGIR'08).

    .. math::
        P(C_i = 1 \mid c_{<i}) = \gamma[r_i, l_i]\, a_i, \qquad
        l_i = 1 + \max\{r_j : j < i,\ c_j = 1\}\ (0 \text{ without a click})

    (the state convention of :meth:`gamma_table`), with :math:`l` from one exclusive ``cummax``.

    Args:
      clicks: ``[..., L]`` 0/1 clicks, in displayed order.
      attraction: ``[..., L]`` click probability given examination.
      gamma: ``[K, K + 1]`` examination table (ranks and states beyond it are clipped to its last row and
        column).
      ranks: ``int[..., L]`` 0-based ranks (default ``arange(L)``).
      where: ``bool[..., L]``.

    Returns:
      ``float32[..., L]`` (0 where masked).

    >>> q = UBM.conditional_click_prob(jnp.array([1.0, 0.0, 0.0]), jnp.ones(3), jnp.asarray(UBM.gamma_table(3)))
    >>> print(q)  # rank 2 is one below the click (0.68), rank 3 two below (0.61)
    [0.68 0.68 0.61]
    """
    log_q, _, where = _ubm_log_q(clicks, attraction, gamma, ranks, where)
    return jnp.where(where, jnp.exp(log_q), 0.0)

  @staticmethod
  def log_likelihood(
    clicks: Array, attraction: Array, gamma: Array, *, ranks: Optional[Array] = None, where: Optional[Array] = None
  ) -> Array:
    r"""Session log-likelihood of the UBM: :math:`\sum_i \log P(c_i \mid c_{<i})` (:meth:`conditional_click_prob`).

    Args:
      clicks: ``[..., L]`` 0/1 clicks, in displayed order.
      attraction: ``[..., L]`` click probability given examination.
      gamma: ``[K, K + 1]`` examination table (ranks and states beyond it are clipped to its last row and
        column).
      ranks: ``int[..., L]`` 0-based ranks (default ``arange(L)``).
      where: ``bool[..., L]``.

    Returns:
      ``float32[...]`` log-likelihood per session.

    >>> ll = UBM.log_likelihood(jnp.array([1.0, 0.0]), jnp.ones(2), jnp.asarray(UBM.gamma_table(2)))
    >>> print(round(float(ll), 6), round(float(jnp.log(0.68 * 0.32)), 6))
    -1.525097 -1.525097
    """
    log_q, log_1mq, where = _ubm_log_q(clicks, attraction, gamma, ranks, where)
    return bernoulli_log_likelihood(clicks, log_q, log_1mq, where=where)


def _ubm_log_q(clicks, attraction, gamma, ranks, where):
  c = jnp.asarray(clicks, jnp.float32)
  a = jnp.broadcast_to(jnp.asarray(attraction, jnp.float32), c.shape)
  where = full_mask(c, where)
  log_q, log_1mq = UBM.filter_log_probs(
    c, safe_log(a), safe_log(jnp.asarray(gamma, jnp.float32)), ranks=ranks, where=where
  )
  return log_q, log_1mq, where
