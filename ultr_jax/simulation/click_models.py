r"""Click models: pure, jittable samplers over ``[..., list_size]``.

Every model has the signature ``model(key, attraction, ..., *, where=None,
positions=None, top_k=None, num_sessions=None, num_impressions=None) ->
dict`` where ``attraction`` is the click probability given examination
(:func:`~ultr_jax.simulation.relevance_probability` of the labels) and the
returned dict holds

* ``clicks``: ``float32[..., L]`` 0/1 clicks (one session per list), or
  ``float32[S, ..., L]`` with ``num_sessions=S``, or the click-through rate
  ``Binomial(N, p) / N`` with ``num_impressions=N`` (aggregated mode, as the
  identifiability datasets use; then also ``click_counts``);
* ``examination``: the true marginal examination probability of each item at
  its position (the oracle IPS propensity), 0 where masked or not shown;
* ``click_prob``: the true marginal click probability of each item;
* ``conditional_click_prob``: (sessions only, not with ``num_impressions``)
  :math:`P(C_i = 1 \mid c_{<i})`, the true probability of each item's click
  given the sampled clicks above it in display order, shaped like ``clicks``:
  what a click model's held-out perplexity scores, so the generating model's
  own perplexity is the floor (in expectation) of a fitted one. It is ``click_prob``
  where clicks are independent given the list (PBM, trust, context-PBM,
  individual) and the click-chain or UBM filter of
  :mod:`~ultr_jax.simulation.likelihood` otherwise;
* ``shown``: ``bool[..., L]`` when ``top_k`` is set (items beyond ``k`` are
  not displayed and never clicked; CLD's selection indicator).

Padded items (``where`` False) never click and do not change the other
items' probabilities. ``vmap`` adds queries; ``num_sessions`` adds a leading
sessions axis. :func:`make_click_fn` builds the ``click_fn(key, batch)`` the
training loop calls inside its jitted step from an ``ml_collections`` config.
"""

import functools
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax.simulation import likelihood as LL
from ultr_jax.simulation import probabilities as P
from ultr_jax.types import Array, Batch, PRNGKey

__all__ = [
  "sample_clicks",
  "sample_dcm_clicks",
  "pbm",
  "pbm_table",
  "trust",
  "cascade",
  "dcm",
  "dbn",
  "ccm",
  "sample_chain_clicks",
  "ubm",
  "sample_ubm_clicks",
  "context_pbm",
  "individual",
  "click_models",
  "make_click_fn",
]


# ----------------------------------------------------------------------------
# Samplers.


def sample_clicks(
  key: PRNGKey,
  click_prob: Array,
  *,
  where: Optional[Array] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> Array:
  r"""Independent Bernoulli (or aggregated Binomial) clicks.

  .. math::
      C_i \sim \mathrm{Bernoulli}(p_i) \quad\text{or}\quad
      \mathrm{CTR}_i = \mathrm{Binomial}(N, p_i) / N

  Args:
    key: PRNG key.
    click_prob: ``[..., L]`` marginal click probabilities.
    where: ``bool[..., L]``; masked items never click.
    num_sessions: if set, a leading axis of that many independent sessions.
    num_impressions: if set, returns CTRs over that many impressions.

  Returns:
    ``float32[..., L]`` (``[S, ..., L]`` with ``num_sessions``).

  >>> c = sample_clicks(jax.random.key(0), jnp.full((4,), 0.5), num_sessions=20000)
  >>> print(round(float(c.mean()), 2))
  0.5
  """
  p = jnp.asarray(click_prob, jnp.float32)
  shape = p.shape if num_sessions is None else (num_sessions,) + p.shape
  if num_impressions is not None:
    c = jax.random.binomial(key, float(num_impressions), jnp.broadcast_to(p, shape), shape=shape)
    c = c.astype(jnp.float32) / float(num_impressions)
  else:
    c = (jax.random.uniform(key, shape) < p).astype(jnp.float32)
  if where is not None:
    c = jnp.where(where, c, 0.0)
  return c


def sample_dcm_clicks(
  key: PRNGKey,
  attraction: Array,
  *,
  continuation: Array | float = 0.0,
  where: Optional[Array] = None,
  num_sessions: Optional[int] = None,
) -> Array:
  r"""One DCM / cascade session per list, in displayed (array) order.

  The user scans down the list; at an examined item they click with
  probability :math:`r_i` and after a click continue with probability
  :math:`\lambda_i` (cascade: :math:`\lambda = 0`). With attraction draws
  :math:`A_i \sim \mathrm{Bern}(r_i)` and continuation draws
  :math:`V_i \sim \mathrm{Bern}(\lambda_i)`, drawn for every item at once,

  .. math::
      E_i = \mathbb{1}\Bigl[\sum_{j<i} A_j (1 - V_j) = 0\Bigr]
          = \mathbb{1}[i \le \min\{j: A_j (1 - V_j) = 1\}], \qquad C_i = E_i A_i

  which is exact (the user stops at the first click without continuation)
  and needs one ``argmax`` reduction instead of a loop over positions.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    continuation: :math:`\lambda`, scalar or ``[..., L]``.
    where: ``bool[..., L]`` displayed items (masked items are skipped).
    num_sessions: if set, a leading sessions axis.

  Returns:
    ``float32[..., L]`` clicks (``[S, ..., L]`` with ``num_sessions``).

  >>> c = sample_dcm_clicks(jax.random.key(0), jnp.ones(3), num_sessions=5)
  >>> print(c.sum(0))
  [5. 0. 0.]
  """
  r = jnp.asarray(attraction, jnp.float32)
  shape = r.shape if num_sessions is None else (num_sessions,) + r.shape
  k_a, k_v = jax.random.split(key)
  attracted = jax.random.uniform(k_a, shape) < r
  if where is not None:
    attracted = attracted & where
  if isinstance(continuation, (int, float)) and continuation == 0:
    stop = attracted
  else:
    stop = attracted & ~(jax.random.uniform(k_v, shape) < jnp.asarray(continuation, jnp.float32))
  # The user leaves at the first stop: clicks are the attracted items up to and
  # including it. argmax finds it in one reduction (cheaper than a cumsum,
  # which XLA lowers to a reduce-window on CPU).
  list_size = r.shape[-1]
  first_stop = jnp.where(jnp.any(stop, axis=-1), jnp.argmax(stop, axis=-1), list_size)
  return (attracted & (jnp.arange(list_size) <= first_stop[..., None])).astype(jnp.float32)


def sample_chain_clicks(
  key: PRNGKey,
  attraction: Array,
  *,
  continue_no_click: Array | float,
  continue_click: Array | float,
  where: Optional[Array] = None,
  num_sessions: Optional[int] = None,
) -> Array:
  r"""One click-chain session per list (DBN, CCM), in displayed (array) order.

  The user scans down the list; an examined item is clicked when attractive
  (:math:`A_i \sim \mathrm{Bern}(r_i)`), and the user goes on with
  probability :math:`c^1_i` after a click, :math:`c^0_i` without one. With
  every draw made at once (:math:`U_i \sim U(0, 1)`), the stop event is
  :math:`T_i = \mathbb{1}[U_i \ge c^{A_i}_i]` and

  .. math::
      E_i = \mathbb{1}\Bigl[\sum_{j<i} T_j = 0\Bigr], \qquad C_i = E_i A_i,

  exact and loop-free, as :func:`sample_dcm_clicks`.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    continue_no_click, continue_click: :math:`c^0, c^1`, scalars or
      ``[..., L]``.
    where: ``bool[..., L]`` displayed items (masked items are skipped).
    num_sessions: if set, a leading sessions axis.

  Returns:
    ``float32[..., L]`` clicks (``[S, ..., L]`` with ``num_sessions``).

  >>> c = sample_chain_clicks(jax.random.key(0), jnp.ones(3), continue_no_click=1.0,
  ...                         continue_click=0.0, num_sessions=4)
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
  list_size = r.shape[-1]
  first_stop = jnp.where(jnp.any(stop, axis=-1), jnp.argmax(stop, axis=-1), list_size)
  return (attracted & (jnp.arange(list_size) <= first_stop[..., None])).astype(jnp.float32)


def sample_ubm_clicks(
  key: PRNGKey,
  attraction: Array,
  gamma: Array,
  *,
  ranks: Optional[Array] = None,
  where: Optional[Array] = None,
  num_sessions: Optional[int] = None,
) -> Array:
  r"""User browsing model sessions (Dupret & Piwowarski SIGIR'08), items in displayed order.

  The user scans down the list; item ``j`` at rank :math:`r_j` is examined
  with probability :math:`\gamma[r_j, l]`, where ``l`` is the state of the
  last click (0 = none, ``i + 1`` = rank ``i``), and clicked with probability
  :math:`a_j` once examined. One ``lax.scan`` step per displayed item carries
  the last-click state of every session and list; the uniforms are drawn at
  once.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    gamma: ``[K, K + 1]`` examination table
      (:func:`~ultr_jax.simulation.ubm_gamma`).
    ranks: ``int[..., L]`` 0-based ranks (default ``arange(L)``).
    where: ``bool[..., L]`` displayed items (masked items are skipped).
    num_sessions: if set, a leading sessions axis.

  Returns:
    ``float32[..., L]`` clicks (``[S, ..., L]`` with ``num_sessions``).

  >>> g = jnp.asarray(P.ubm_gamma(2))
  >>> c = sample_ubm_clicks(jax.random.key(0), jnp.ones(2), g, num_sessions=20000)
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


# ----------------------------------------------------------------------------
# Models.


def _prepare(attraction, where, positions, top_k):
  r = jnp.asarray(attraction, jnp.float32)
  if where is None:
    where = jnp.ones(r.shape, bool)
  if positions is None:
    positions = jnp.broadcast_to(jnp.arange(r.shape[-1], dtype=jnp.int32), r.shape)
  shown = where if top_k is None else where & (positions < top_k)
  return r, where, positions, shown


def _independent(key, exam, click_prob, where, shown, top_k, num_sessions, num_impressions):
  exam = jnp.where(shown, exam, 0.0)
  click_prob = jnp.where(shown, click_prob, 0.0)
  out = {"examination": exam, "click_prob": click_prob}
  clicks = sample_clicks(key, click_prob, where=shown, num_sessions=num_sessions, num_impressions=num_impressions)
  out["clicks"] = clicks
  if num_impressions is not None:
    out["click_counts"] = jnp.round(clicks * num_impressions).astype(jnp.int32)
  else:  # clicks independent given the list: the marginal is the conditional
    out["conditional_click_prob"] = jnp.broadcast_to(click_prob, clicks.shape)
  if top_k is not None:
    out["shown"] = shown
  return out


def pbm(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  eta: float = 1.0,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Position-based model with :math:`(1/\mathrm{rank})^\eta` examination (CLD Eq. 13).

  .. math::
      P(C_i = 1) = (p_i + 1)^{-\eta}\,\mathbb{1}[p_i < k]\; r_i

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default ``arange(L)``).
    eta: position-bias severity.
    top_k: display cut-off (``shown`` is returned).
    num_sessions: leading sessions axis.
    num_impressions: aggregated CTR mode.

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see the module docstring.

  >>> out = pbm(jax.random.key(0), jnp.ones(3), eta=1.0)
  >>> print(np.asarray(out["examination"]).round(4))
  [1.     0.5    0.3333]
  """
  r, where, positions, shown = _prepare(attraction, where, positions, top_k)
  exam = P.pbm_examination(positions, eta=eta)
  return _independent(key, exam, exam * r, where, shown, top_k, num_sessions, num_impressions)


def pbm_table(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  eta: float = 1.0,
  table: Sequence[float] = P.ULTRA_EXAM_TABLE,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""ULTRA's position-based model: eye-tracking table to the power :math:`\eta`.

  .. math::
      P(C_i = 1) = v_{p_i}^{\,\eta}\; r_i

  (:func:`~ultr_jax.simulation.pbm_table_examination`; positions beyond the
  table reuse its last value). Arguments as :func:`pbm`, plus ``table``.

  >>> out = pbm_table(jax.random.key(0), jnp.full(2, 0.5), eta=1.0)
  >>> print(out["click_prob"])
  [0.34  0.305]
  """
  r, where, positions, shown = _prepare(attraction, where, positions, top_k)
  exam = P.pbm_table_examination(positions, eta=eta, table=table)
  return _independent(key, exam, exam * r, where, shown, top_k, num_sessions, num_impressions)


def trust(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  eta: float = 1.0,
  epsilon_1_neg: float = 0.65,
  table: Sequence[float] = P.ULTRA_EXAM_TABLE,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Trust-bias model (Agarwal et al. WWW'19; Vardasbi et al. CIKM'20; ULTRA).

  .. math::
      P(C_i = 1) = v_{p_i}^{\,\eta}\,\bigl[\epsilon^+_{p_i} r_i + \epsilon^-_{p_i}(1 - r_i)\bigr],
      \quad \epsilon^+_p = 1 - \tfrac{p + 2}{100},\ \epsilon^-_p = \tfrac{\epsilon^-_1}{p + 1}

  The output also holds ``eps_plus`` and ``eps_minus`` (the affine
  correction's oracle parameters). Arguments as :func:`pbm_table`.

  >>> out = trust(jax.random.key(0), jnp.array([1.0, 0.0]))
  >>> print(np.asarray(out["click_prob"]).round(4))
  [0.6664 0.1982]
  """
  r, where, positions, shown = _prepare(attraction, where, positions, top_k)
  exam = P.pbm_table_examination(positions, eta=eta, table=table)
  eps_plus, eps_minus = P.trust_bias_epsilons(positions, epsilon_1_neg=epsilon_1_neg)
  click_prob = exam * (eps_plus * r + eps_minus * (1.0 - r))
  out = _independent(key, exam, click_prob, where, shown, top_k, num_sessions, num_impressions)
  out["eps_plus"] = jnp.where(shown, eps_plus, 0.0)
  out["eps_minus"] = jnp.where(shown, eps_minus, 0.0)
  return out


def _display_order(positions, where):
  """Permutation sorting items by position (masked last) and its inverse."""
  big = jnp.iinfo(jnp.int32).max
  order = jnp.argsort(jnp.where(where, positions, big), axis=-1, stable=True)
  inverse = jnp.argsort(order, axis=-1, stable=True)
  return order, inverse


def dcm(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  continuation: Array | float | Sequence[float] = 0.5,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Dependent click model (Guo et al. WSDM'09); the cascade model at :math:`\lambda=0`.

  .. math::
      P(E_i = 1) = \prod_{j:\,p_j < p_i} \bigl(1 - r_j (1 - \lambda_{p_j})\bigr), \qquad
      P(C_i = 1) = P(E_i = 1)\, r_i

  Items are examined in order of ``positions`` (array order by default);
  items not shown (beyond ``top_k``) or masked are skipped. Sessions are
  sampled jointly (:func:`sample_dcm_clicks`); in aggregated mode
  (``num_impressions``) each record's CTR is drawn from its marginal click
  probability, as for the other models.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default ``arange(L)``).
    continuation: :math:`\lambda`, a scalar, ``[..., L]`` per item, or a
      per-position sequence (positions beyond reuse the last value).
    top_k: display cut-off.
    num_sessions: leading sessions axis.
    num_impressions: aggregated CTR mode.

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see the module docstring.

  >>> out = dcm(jax.random.key(0), jnp.array([0.5, 0.5, 0.5]), continuation=0.5)
  >>> print(out["examination"])
  [1.     0.75   0.5625]
  """
  given_positions = positions is not None
  r, where, positions, shown = _prepare(attraction, where, positions, top_k)
  lam = _per_item(continuation, positions, r.shape, "dcm.continuation")
  if given_positions:
    order, inverse = _display_order(positions, shown)
    take = lambda x, idx: jnp.take_along_axis(x, idx, axis=-1)
    r_s, shown_s = take(r, order), take(shown, order)
    lam_s = lam if isinstance(lam, float) else take(lam, order)
  else:
    r_s, shown_s, lam_s, inverse = r, shown, lam, None
  exam_s = P.dcm_examination(r_s, continuation=lam_s, where=shown_s)
  sample = lambda: sample_dcm_clicks(key, r_s, continuation=lam_s, where=shown_s, num_sessions=num_sessions)
  conditional = lambda c: LL.chain_conditional_click_prob(
    c, r_s, continue_no_click=1.0, continue_click=lam_s, where=shown_s
  )
  return _sequential_out(
    key, exam_s, inverse, sample, conditional, r, where, shown, top_k, num_sessions, num_impressions
  )


def cascade(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Cascade model (Craswell et al. WSDM'08; ULTRA ``cascade_model``): stop at the first click.

  .. math::
      P(E_i = 1) = \prod_{j:\,p_j < p_i} (1 - r_j), \qquad P(C_i = 1) = P(E_i = 1)\, r_i

  :func:`dcm` with :math:`\lambda = 0`; arguments as :func:`dcm`.

  >>> out = cascade(jax.random.key(0), jnp.array([0.5, 0.5, 0.5]))
  >>> print(out["click_prob"])
  [0.5   0.25  0.125]
  """
  return dcm(
    key,
    attraction,
    where=where,
    positions=positions,
    continuation=0.0,
    top_k=top_k,
    num_sessions=num_sessions,
    num_impressions=num_impressions,
  )


def _sequential_out(key, exam_s, inverse, sample, conditional, r, where, shown, top_k, num_sessions, num_impressions):
  """The dict of a sequential model from its display-order examination ``exam_s``, session sampler
  ``sample()`` and filter ``conditional(clicks) -> P(C_i = 1 | c_<i)``, both in display order
  (``inverse`` maps display order back to array order; None: the same)."""
  back = lambda x: x if inverse is None else jnp.take_along_axis(x, jnp.broadcast_to(inverse, x.shape), axis=-1)
  exam = back(exam_s)
  click_prob = exam * r
  if num_impressions is not None:
    return _independent(key, exam, click_prob, where, shown, top_k, num_sessions, num_impressions)
  clicks_s = sample()
  out = {
    "examination": exam,
    "click_prob": click_prob,
    "clicks": back(clicks_s),
    "conditional_click_prob": back(conditional(clicks_s)),
  }
  if top_k is not None:
    out["shown"] = shown
  return out


def _per_item(value, positions, shape, name):
  """A scalar, a per-position sequence (the last value reused beyond it) or ``[..., L]`` values."""
  if isinstance(value, (int, float)):
    return float(value)
  if isinstance(value, (list, tuple)):
    table = jnp.asarray(value, jnp.float32)
    if table.ndim != 1 or table.shape[0] == 0:
      raise ValueError(f"{name}: a per-position sequence must be non-empty and flat")
    return table[jnp.clip(positions, 0, table.shape[0] - 1)]
  return jnp.broadcast_to(jnp.asarray(value, jnp.float32), shape)


def _chain_model(key, r, where, positions, shown, given_positions, c0, c1, top_k, num_sessions, num_impressions):
  """A click-chain model's dict, the chain run in order of ``positions``."""
  if given_positions:
    order, inverse = _display_order(positions, shown)
    take = lambda x: x if isinstance(x, float) else jnp.take_along_axis(x, order, axis=-1)
    r_s, shown_s, c0_s, c1_s = take(r), take(shown), take(c0), take(c1)
  else:
    r_s, shown_s, c0_s, c1_s = r, shown, c0, c1
    inverse = None
  exam_s = P.chain_examination(r_s, continue_no_click=c0_s, continue_click=c1_s, where=shown_s)
  sample = lambda: sample_chain_clicks(
    key, r_s, continue_no_click=c0_s, continue_click=c1_s, where=shown_s, num_sessions=num_sessions
  )
  conditional = lambda c: LL.chain_conditional_click_prob(
    c, r_s, continue_no_click=c0_s, continue_click=c1_s, where=shown_s
  )
  return _sequential_out(
    key, exam_s, inverse, sample, conditional, r, where, shown, top_k, num_sessions, num_impressions
  )


def dbn(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  perseverance: float = 0.9,
  satisfaction: Optional[Array | float | Sequence[float]] = None,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Dynamic Bayesian network click model (Chapelle & Zhang, WWW'09).

  An examined item is clicked when attractive (:math:`a_i`); a click
  satisfies the user with probability :math:`\sigma_i`, who then leaves;
  an unsatisfied user goes on with probability :math:`\gamma` (the
  perseverance):

  .. math::
      P(E_1 = 1) = 1, \qquad
      P(E_{i+1} = 1 \mid E_i = 1) = \gamma\,(1 - a_i \sigma_i), \qquad C_i = E_i A_i

  (:func:`~ultr_jax.simulation.chain_examination` with :math:`c^0 = \gamma`,
  :math:`c^1 = \gamma (1 - \sigma_i)`). By default the satisfaction is the
  attraction (a relevant document both attracts and satisfies, as in the
  usual DBN simulations); with :math:`\gamma = 1, \sigma = 1` it is the
  cascade model. Items are examined in order of ``positions``; items beyond
  ``top_k`` or masked are skipped.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default ``arange(L)``).
    perseverance: :math:`\gamma`, in ``[0, 1]``.
    satisfaction: :math:`\sigma`: None (the attraction), a scalar,
      ``[..., L]`` per item, or a per-position sequence.
    top_k: display cut-off.
    num_sessions: leading sessions axis.
    num_impressions: aggregated CTR mode (marginal click probabilities).

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see the module docstring.

  >>> out = dbn(jax.random.key(0), jnp.array([0.5, 0.5, 0.5]), perseverance=0.9)
  >>> print([round(float(v), 6) for v in out["examination"]])  # 0.9 * (1 - 0.25) = 0.675 per step
  [1.0, 0.675, 0.455625]
  """
  given_positions = positions is not None
  r, where, positions, shown = _prepare(attraction, where, positions, top_k)
  sigma = r if satisfaction is None else _per_item(satisfaction, positions, r.shape, "dbn.satisfaction")
  gamma = float(perseverance)
  return _chain_model(
    key, r, where, positions, shown, given_positions, gamma, gamma * (1.0 - sigma), top_k, num_sessions, num_impressions
  )


def ccm(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  alpha: Sequence[float] = (0.9, 0.8, 0.2),
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Click chain model (Guo, Liu, Kannan, Minka, Taylor, Wang & Faloutsos, WWW'09).

  Without a click the user goes on with probability :math:`\alpha_1`; after
  a click on an item of relevance :math:`r_i`, with probability
  :math:`\alpha_2 (1 - r_i) + \alpha_3 r_i` (a relevant click ends more
  sessions):

  .. math::
      P(E_{i+1} = 1 \mid E_i = 1) = (1 - r_i)\,\alpha_1
        + r_i\,\bigl(\alpha_2 (1 - r_i) + \alpha_3 r_i\bigr), \qquad C_i = E_i A_i

  with the attraction as :math:`r_i`
  (:func:`~ultr_jax.simulation.chain_examination`). Items are examined in
  order of ``positions``; items beyond ``top_k`` or masked are skipped.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default ``arange(L)``).
    alpha: :math:`(\alpha_1, \alpha_2, \alpha_3)`, each in ``[0, 1]``.
    top_k: display cut-off.
    num_sessions: leading sessions axis.
    num_impressions: aggregated CTR mode (marginal click probabilities).

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see the module docstring.

  >>> out = ccm(jax.random.key(0), jnp.array([0.5, 0.5, 0.5]), alpha=(0.9, 0.8, 0.2))
  >>> print([round(float(v), 6) for v in out["examination"]])  # 0.5 * 0.9 + 0.5 * 0.5 = 0.7 per step
  [1.0, 0.7, 0.49]
  """
  given_positions = positions is not None
  r, where, positions, shown = _prepare(attraction, where, positions, top_k)
  a1, a2, a3 = (float(v) for v in alpha)
  return _chain_model(
    key, r, where, positions, shown, given_positions, a1, a2 * (1.0 - r) + a3 * r, top_k, num_sessions, num_impressions
  )


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
  (:func:`~ultr_jax.simulation.ubm_examination`), the oracle propensity an
  IPS learner would use; ``click_prob`` is ``examination * attraction``.
  Items are examined in order of ``positions``; items beyond ``top_k`` or
  masked are skipped (they break no distance: the rank is the position).

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default ``arange(L)``).
    gamma: ``[K, K + 1]`` examination table (rank, last-click state);
      default :func:`~ultr_jax.simulation.ubm_gamma` of ``table`` and
      ``eta`` over ``L`` ranks (the PBM table before any click).
    eta, table: the default table's power and per-distance values.
    top_k: display cut-off.
    num_sessions: leading sessions axis.
    num_impressions: aggregated CTR mode (marginal click probabilities).

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see the module docstring.

  >>> out = ubm(jax.random.key(0), jnp.array([0.0, 0.0, 0.0]))  # no clicks: the PBM table
  >>> print(out["examination"])
  [0.68 0.61 0.48]
  """
  given_positions = positions is not None
  r, where, positions, shown = _prepare(attraction, where, positions, top_k)
  g = jnp.asarray(P.ubm_gamma(r.shape[-1], eta=eta, table=table) if gamma is None else gamma, jnp.float32)
  if given_positions:
    order, inverse = _display_order(positions, shown)
    take = lambda x, idx: jnp.take_along_axis(x, idx, axis=-1)
    r_s, shown_s, ranks_s = take(r, order), take(shown, order), take(positions, order)
  else:
    r_s, shown_s, ranks_s, inverse = r, shown, positions, None
  exam_s = P.ubm_examination(r_s, g, ranks=ranks_s, where=shown_s)
  sample = lambda: sample_ubm_clicks(key, r_s, g, ranks=ranks_s, where=shown_s, num_sessions=num_sessions)
  conditional = lambda c: LL.ubm_conditional_click_prob(c, r_s, g, ranks=ranks_s, where=shown_s)
  return _sequential_out(
    key, exam_s, inverse, sample, conditional, r, where, shown, top_k, num_sessions, num_impressions
  )


def context_pbm(
  key: PRNGKey,
  attraction: Array,
  context: Array,
  *,
  context_vectors: Array,
  w: Array,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  eta: float = 1.0,
  table: Sequence[float] = P.ULTRA_EXAM_TABLE,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Context-dependent PBM (Identifiability ICML'24 C.2; Fang et al. 2019).

  .. math::
      P(C_i = 1) = v_{p_i}^{\,\eta \max\{w^\top X_{t_i} + 1,\ 0\}}\; r_i

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    context: ``int[..., L]`` (per item) or ``int[...]`` (per list) context type.
    context_vectors: ``float[T, D]`` (:func:`~ultr_jax.simulation.make_context_vectors`).
    w: ``float[D]``.
    where, positions, eta, table, top_k, num_sessions, num_impressions: as
      :func:`pbm_table`.

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see the module docstring.

  >>> out = context_pbm(jax.random.key(0), jnp.ones(2), jnp.array(1),
  ...                   context_vectors=jnp.array([[0.0], [1.0]]), w=jnp.array([1.0]))
  >>> print(np.asarray(out["examination"]).round(4))
  [0.4624 0.3721]
  """
  r, where, positions, shown = _prepare(attraction, where, positions, top_k)
  exam = P.context_pbm_examination(positions, context, context_vectors=context_vectors, w=w, eta=eta, table=table)
  return _independent(key, exam, exam * r, where, shown, top_k, num_sessions, num_impressions)


def individual(
  key: PRNGKey,
  attraction: Array,
  crux_features: Array,
  w: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  eta: float = 1.0,
  table: Sequence[float] = P.ULTRA_EXAM_TABLE,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Individual-level observation model of LBD (NeurIPS'22, spec-lbd 4.3).

  .. math::
      P(C_i = 1) = v_{p_i}^{\,\eta \max\{1 + w^\top x'_i,\ 0\}}\; r_i

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    crux_features: ``float[..., L, D]`` the crux features :math:`x'`.
    w: ``float[D]`` coupling vector (0 gives ULTRA's PBM).
    where, positions, eta, table, top_k, num_sessions, num_impressions: as
      :func:`pbm_table`.

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see the module docstring.

  >>> out = individual(jax.random.key(0), jnp.ones(2), jnp.zeros((2, 3)), jnp.ones(3))
  >>> print(out["examination"])
  [0.68 0.61]
  """
  r, where, positions, shown = _prepare(attraction, where, positions, top_k)
  exam = P.individual_examination(positions, crux_features, w, eta=eta, table=table)
  return _independent(key, exam, exam * r, where, shown, top_k, num_sessions, num_impressions)


# ----------------------------------------------------------------------------
# Config-driven factory.

_MODELS = ("pbm", "pbm_table", "trust", "cascade", "dcm", "ubm", "context_pbm", "individual", "dbn", "ccm")

_COMMON_KEYS = {
  "name",
  "eta",
  "eps",
  "eps_plus",
  "ymax",
  "relevance",
  "threshold",
  "top_k",
  "num_sessions",
  "num_impressions",
}
_MODEL_KEYS = {
  "pbm": set(),
  "pbm_table": {"table"},
  "trust": {"table", "epsilon_1_neg"},
  "cascade": set(),
  "dcm": {"continuation"},
  "ubm": {"table", "gamma"},
  "context_pbm": {"table", "context_vectors", "num_contexts", "context_dim", "context_scale", "context_seed", "w"},
  "individual": {"table", "crux_indices", "w"},
  "dbn": {"perseverance", "satisfaction"},
  "ccm": {"alpha"},
}


def click_models() -> tuple[str, ...]:
  """Names accepted by :func:`make_click_fn` (``config.name``).

  >>> print(len(click_models()), click_models()[0])
  10 pbm
  """
  return _MODELS


def _as_dict(config: Any) -> dict:
  if hasattr(config, "to_dict"):
    config = config.to_dict()
  return {k: v for k, v in dict(config).items() if v is not None}


def make_click_fn(config: Any) -> Callable[[PRNGKey, Batch], dict]:
  r"""Builds ``click_fn(key, batch) -> dict`` from a config.

  ``config`` (an ``ml_collections.ConfigDict`` or mapping) holds ``name``
  (one of :func:`click_models`) and optionally

  * relevance: ``relevance`` (``"graded"``, default, or ``"binary"``),
    ``eps`` (0.1), ``eps_plus`` (1.0), ``ymax`` (4), ``threshold`` (3, binary);
  * ``eta`` (1.0), ``top_k``, ``num_sessions``, ``num_impressions``;
  * ``table`` (pbm_table/trust/ubm/context_pbm/individual), ``epsilon_1_neg``
    (trust, 0.65), ``continuation`` (dcm, 0.5; scalar or per position);
  * dbn: ``perseverance`` (0.9) and ``satisfaction`` (default the
    attraction; scalar or per position); ccm: ``alpha`` ((0.9, 0.8, 0.2));
  * ubm: ``gamma``, a ``[K, K + 1]`` (rank, last-click state) examination
    table (default :func:`~ultr_jax.simulation.ubm_gamma` of ``table`` and ``eta``);
  * context_pbm: ``context_vectors`` ``[T, D]`` or ``num_contexts``
    (+ ``context_dim`` 10, ``context_scale`` 0.35, ``context_seed`` 0) and
    ``w`` (default the identifiability repo's vector); reads
    ``batch["context"]``;
  * individual: ``crux_indices`` (feature indices) and ``w``; reads
    ``batch["features"]``.

  ``batch`` is the standard batch dict (``labels``, ``where``, optional
  ``positions``, ``features``, ``context``). The result holds ``clicks``
  (float32), ``examination`` (oracle propensities), ``click_prob`` and, with
  ``top_k``, ``shown`` (see the module docstring).

  Raises:
    ValueError: for an unknown model name or config key.

  >>> fn = make_click_fn({"name": "pbm_table", "eta": 1.0, "eps": 0.1})
  >>> out = fn(jax.random.key(0), {"labels": jnp.array([4.0, 0.0]), "where": jnp.ones(2, bool)})
  >>> print(out["click_prob"])
  [0.68  0.061]
  """
  cfg = _as_dict(config)
  name = cfg.get("name")
  if name not in _MODELS:
    raise ValueError(f"click_model.name: unknown click model {name!r}; expected one of {_MODELS}")
  unknown = set(cfg) - _COMMON_KEYS - _MODEL_KEYS[name]
  if unknown:
    raise ValueError(f"click_model: unknown keys {sorted(unknown)} for model {name!r}")
  relevance = cfg.get("relevance", "graded")
  if relevance == "graded":
    rel_fn = functools.partial(
      P.relevance_probability, eps=cfg.get("eps", 0.1), eps_plus=cfg.get("eps_plus", 1.0), ymax=cfg.get("ymax", 4)
    )
  elif relevance == "binary":
    rel_fn = functools.partial(
      P.binary_relevance_probability,
      threshold=cfg.get("threshold", 3),
      eps=cfg.get("eps", 0.1),
      eps_plus=cfg.get("eps_plus", 1.0),
    )
  else:
    raise ValueError(f"click_model.relevance: expected 'graded' or 'binary', got {relevance!r}")
  common = {k: cfg[k] for k in ("top_k", "num_sessions", "num_impressions") if k in cfg}
  for k in common:
    common[k] = int(common[k])
  kwargs: dict[str, Any] = dict(common)
  if name in ("pbm", "pbm_table", "trust", "ubm", "context_pbm", "individual"):
    kwargs["eta"] = float(cfg.get("eta", 1.0))
  if "table" in cfg:
    kwargs["table"] = tuple(float(v) for v in cfg["table"])
  if name == "trust":
    kwargs["epsilon_1_neg"] = float(cfg.get("epsilon_1_neg", 0.65))
  if name == "ubm" and "gamma" in cfg:
    gamma = np.asarray(cfg["gamma"], np.float32)
    if gamma.ndim != 2 or gamma.shape[1] != gamma.shape[0] + 1 or np.any((gamma < 0) | (gamma > 1)):
      raise ValueError(f"click_model.gamma: expected a [K, K + 1] table of probabilities, got shape {gamma.shape}")
    kwargs["gamma"] = gamma
  if name == "dcm":
    lam = cfg.get("continuation", 0.5)
    kwargs["continuation"] = tuple(float(v) for v in lam) if isinstance(lam, (list, tuple)) else float(lam)
  if name == "dbn":
    gamma = float(cfg.get("perseverance", 0.9))
    if not 0.0 <= gamma <= 1.0:
      raise ValueError(f"click_model.perseverance: expected a probability, got {gamma}")
    kwargs["perseverance"] = gamma
    if "satisfaction" in cfg:
      sigma = cfg["satisfaction"]
      values = np.atleast_1d(np.asarray(sigma, np.float64))
      if values.size == 0 or np.any(~((values >= 0) & (values <= 1))):
        raise ValueError(f"click_model.satisfaction: expected probabilities, got {sigma!r}")
      kwargs["satisfaction"] = tuple(float(v) for v in sigma) if isinstance(sigma, (list, tuple)) else float(sigma)
  if name == "ccm":
    alpha = tuple(float(v) for v in cfg.get("alpha", (0.9, 0.8, 0.2)))
    if len(alpha) != 3 or any(not 0.0 <= v <= 1.0 for v in alpha):
      raise ValueError(f"click_model.alpha: expected three probabilities (alpha_1, alpha_2, alpha_3), got {alpha}")
    kwargs["alpha"] = alpha
  if name == "context_pbm":
    if "context_vectors" in cfg:
      vectors = np.asarray(cfg["context_vectors"], np.float32)
    elif "num_contexts" in cfg:
      vectors = P.make_context_vectors(
        int(cfg["num_contexts"]),
        dim=int(cfg.get("context_dim", 10)),
        scale=float(cfg.get("context_scale", 0.35)),
        seed=int(cfg.get("context_seed", 0)),
      )
    else:
      raise ValueError("click_model: context_pbm needs context_vectors or num_contexts")
    w = np.asarray(cfg.get("w", P.IDENTIFIABILITY_CONTEXT_W), np.float32)
    if w.shape != (vectors.shape[1],):
      raise ValueError(f"click_model.w: shape {w.shape} does not match context_dim {vectors.shape[1]}")
    kwargs.update(context_vectors=vectors, w=w)
  if name == "individual":
    if "crux_indices" not in cfg or "w" not in cfg:
      raise ValueError("click_model: individual needs crux_indices and w")
    crux = np.asarray(cfg["crux_indices"], np.int32)
    w = np.asarray(cfg["w"], np.float32)
    if w.shape != crux.shape:
      raise ValueError(f"click_model.w: shape {w.shape} does not match crux_indices {crux.shape}")
    kwargs["w"] = w
  model = globals()[name]

  def click_fn(key: PRNGKey, batch: Batch) -> dict:
    if "labels" not in batch or "where" not in batch:
      raise ValueError("click_fn: batch needs 'labels' and 'where'")
    attraction = rel_fn(batch["labels"])
    where = jnp.asarray(batch["where"], bool)
    positions = batch.get("positions")
    if name == "context_pbm":
      if "context" not in batch:
        raise ValueError("click_fn: context_pbm needs batch['context']")
      return model(key, attraction, batch["context"], where=where, positions=positions, **kwargs)
    if name == "individual":
      if "features" not in batch:
        raise ValueError("click_fn: individual needs batch['features']")
      crux_features = jnp.asarray(batch["features"])[..., crux]
      return model(key, attraction, crux_features, where=where, positions=positions, **kwargs)
    return model(key, attraction, where=where, positions=positions, **kwargs)

  return click_fn
