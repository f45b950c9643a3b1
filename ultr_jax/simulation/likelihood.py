r"""Click models as likelihoods: each click's probability given the clicks above it.

The samplers of :mod:`~ultr_jax.simulation.click_models` draw sessions; the
functions here score observed ones. For a session's clicks
:math:`c_1, \dots, c_L` (items in displayed order) every click model factorises
as

.. math::
    \log P(c_{1:L}) = \sum_i c_i \log q_i + (1 - c_i) \log(1 - q_i), \qquad
    q_i = P(C_i = 1 \mid c_{<i}),

so one function per model family gives the conditional click probabilities
:math:`q` (for the conditional perplexity per rank, CLAX's and PyClick's
evaluation) and the session log-likelihood (for fitting a click model to a
log by gradient, :func:`~ultr_jax.simulation.fit_click_model`):

* independent models (PBM, trust bias, context PBM, individual-level):
  :math:`q_i` is the marginal click probability;
* click chains (cascade, DCM, DBN, CCM; :func:`chain_continuations`): the
  posterior examination is filtered down the list by one ``lax.scan`` in log
  space;
* the UBM: :math:`q_i = \gamma[r_i, l_i]\,a_i` with :math:`l_i` the last
  click above, found by a ``cummax``.

All take ``[..., L]`` arrays with a bool ``where`` (masked items are skipped:
they neither click nor change the state) and ``vmap`` over sessions. An
observation a model cannot produce (a second click under the cascade) has
log-likelihood :math:`-\infty`.
"""

from typing import Optional, Sequence

import jax
import jax.numpy as jnp

from ultr_jax.simulation.click_models.base import click_models, get_click_model, log1mexp as _log1mexp
from ultr_jax.types import Array

__all__ = [
  "bernoulli_log_likelihood",
  "chain_continuations",
  "chain_conditional_click_prob",
  "chain_log_likelihood",
  "chain_log_probs",
  "log_bias_from_logits",
  "log_probs_from_logs",
  "logit_bias_shapes",
  "logit_log_probs",
  "ubm_conditional_click_prob",
  "ubm_log_likelihood",
  "ubm_log_probs",
]


def __getattr__(name: str):
  """``CHAIN_MODELS`` and ``LOGIT_MODELS``: views of the click-model registry (computed when read)."""
  if name == "CHAIN_MODELS":
    return click_models("chain")
  if name == "LOGIT_MODELS":
    return click_models("fittable")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _where(x: Array, where: Optional[Array]) -> Array:
  return jnp.ones(x.shape, bool) if where is None else jnp.broadcast_to(jnp.asarray(where, bool), x.shape)


def _safe_log(p: Array) -> Array:
  return jnp.log(jnp.clip(p, 0.0, 1.0))


def bernoulli_log_likelihood(clicks: Array, log_q: Array, log_1mq: Array, *, where: Optional[Array] = None) -> Array:
  r"""Session log-likelihood :math:`\sum_i c_i \log q_i + (1 - c_i)\log(1 - q_i)` over valid items.

  Takes :math:`\log q` and :math:`\log(1 - q)` separately so neither loses
  precision near 0 or 1 (the chain and UBM functions compute both in log
  space).

  Args:
    clicks: ``[..., L]`` 0/1 clicks.
    log_q, log_1mq: ``[..., L]`` log conditional click and no-click probabilities.
    where: ``bool[..., L]``.

  Returns:
    ``float32[...]`` (0 for a fully masked list).

  >>> q = jnp.array([0.5, 0.25])
  >>> print(bernoulli_log_likelihood(jnp.array([1.0, 0.0]), jnp.log(q), jnp.log1p(-q)))  # log(0.5 * 0.75)
  -0.98082924
  """
  c = jnp.asarray(clicks, jnp.float32)
  where = _where(c, where)
  # Select, not multiply: 0 * -inf would be NaN for the outcome that did not happen.
  term = jnp.where(c > 0.5, log_q, log_1mq)
  return jnp.sum(jnp.where(where, term, 0.0), axis=-1)


def chain_continuations(
  model: str,
  attraction: Array,
  *,
  continuation: Array | float = 0.5,
  perseverance: Array | float = 0.9,
  satisfaction: Optional[Array | float] = None,
  alpha: Sequence[float] | Array = (0.9, 0.8, 0.2),
) -> tuple[Array, Array]:
  r"""The continuation probabilities :math:`(c^0, c^1)` of a click-chain model.

  A chain user examines the items in order and goes on after item ``i`` with
  probability :math:`c^0_i` without a click and :math:`c^1_i` after one:

  =========  ====================  ====================================================
  model      :math:`c^0`           :math:`c^1`
  =========  ====================  ====================================================
  cascade    1                     0
  dcm        1                     :math:`\lambda_i` (``continuation``)
  dbn        :math:`\gamma`        :math:`\gamma (1 - \sigma_i)` (``perseverance``, ``satisfaction``; :math:`\sigma` = attraction by default)
  ccm        :math:`\alpha_1`      :math:`\alpha_2 (1 - a_i) + \alpha_3 a_i`
  sdbn       1                     :math:`1 - \sigma_i` (``satisfaction``; :math:`\sigma` = attraction by default)
  =========  ====================  ====================================================

  the same parameterisations as :func:`~ultr_jax.simulation.dcm`,
  :func:`~ultr_jax.simulation.dbn` and :func:`~ultr_jax.simulation.ccm`.

  Args:
    model: a click chain of the registry (``cascade``, ``dcm``, ``dbn``, ``ccm``, ``sdbn``; its
      :meth:`~ultr_jax.simulation.ClickModel.continuations`).
    attraction: ``[..., L]`` click probability given examination.
    continuation, perseverance, satisfaction, alpha: the model's parameters,
      scalars or ``[..., L]`` (``alpha`` a length-3 sequence or array).

  Returns:
    ``(c0, c1)``, each broadcast to ``attraction``'s shape.

  >>> c0, c1 = chain_continuations("dbn", jnp.array([0.5, 1.0]), perseverance=0.9)
  >>> print(c0, c1)
  [0.9 0.9] [0.45 0.  ]
  """
  chains = click_models("chain")
  if model not in chains:
    raise ValueError(f"unknown click-chain model {model!r} (expected one of {chains})")
  return get_click_model(model).continuations(
    attraction, continuation=continuation, perseverance=perseverance, satisfaction=satisfaction, alpha=alpha
  )


def chain_log_probs(
  clicks: Array,
  log_attraction: Array,
  log_no_attraction: Array,
  *,
  log_continue_no_click: Array | float,
  log_continue_click: Array | float,
  where: Optional[Array] = None,
) -> tuple[Array, Array]:
  r"""Log conditional click and no-click probabilities of a click chain, from log-space parameters.

  The filter of :func:`chain_conditional_click_prob` with every input a
  logarithm (:math:`\log a`, :math:`\log(1 - a)`, :math:`\log c^0`,
  :math:`\log c^1`), so a learner can pass ``log_sigmoid`` of its logits and
  never leave log space:

  .. math::
      \log q_i = \log\epsilon_i + \log a_i, \qquad
      \log\epsilon_{i+1} = \begin{cases} \log c^1_i & c_i = 1 \\
        \log c^0_i + \log\epsilon_i + \log(1 - a_i) - \log(1 - q_i) & c_i = 0 \end{cases}

  Args:
    clicks: ``[..., L]`` 0/1 clicks, in displayed order.
    log_attraction, log_no_attraction: ``[..., L]`` :math:`\log a`, :math:`\log(1 - a)`.
    log_continue_no_click, log_continue_click: :math:`\log c^0, \log c^1`,
      scalars or ``[..., L]``.
    where: ``bool[..., L]`` (masked items are skipped).

  Returns:
    ``(log_q, log_1mq)``, each ``float32[..., L]`` (:func:`bernoulli_log_likelihood` sums them).

  >>> s = jnp.array([0.0, 0.0])  # attraction logits: a = 1/2
  >>> log_q, _ = chain_log_probs(jnp.array([1.0, 0.0]), jax.nn.log_sigmoid(s), jax.nn.log_sigmoid(-s),
  ...                            log_continue_no_click=0.0, log_continue_click=jnp.log(0.5))
  >>> print(jnp.exp(log_q))  # the DCM with lambda = 1/2
  [0.5  0.25]
  """
  c = jnp.asarray(clicks, jnp.float32)
  full = lambda x: jnp.broadcast_to(jnp.asarray(x, jnp.float32), c.shape)
  where = _where(c, where)

  def step(log_e, x):
    c_i, la, l1a, lc0, lc1, w_i = x
    log_q = log_e + la
    log_1mq = _log1mexp(log_q)
    # The posterior examination of the next item: c1 after a click (the click
    # proves examination), else c0 * P(E_i = 1 | no click) = c0 e (1 - a) / (1 - e a).
    after_skip = lc0 + log_e + l1a - log_1mq
    after_skip = jnp.where(jnp.isneginf(log_e) | jnp.isneginf(l1a), -jnp.inf, after_skip)
    nxt = jnp.minimum(jnp.where(c_i > 0.5, lc1, after_skip), 0.0)  # a probability: rounding stays <= 0
    return jnp.where(w_i, nxt, log_e), (log_q, log_1mq)

  move = lambda x: jnp.moveaxis(x, -1, 0)
  xs = (c, full(log_attraction), full(log_no_attraction), full(log_continue_no_click), full(log_continue_click), where)
  _, (log_q, log_1mq) = jax.lax.scan(step, jnp.zeros(c.shape[:-1], jnp.float32), tuple(map(move, xs)))
  return jnp.moveaxis(log_q, 0, -1), jnp.moveaxis(log_1mq, 0, -1)


def _chain_log_q(clicks, attraction, c0, c1, where):
  """Log conditional click / no-click probabilities of a click chain from probabilities."""
  c = jnp.asarray(clicks, jnp.float32)
  a = jnp.broadcast_to(jnp.asarray(attraction, jnp.float32), c.shape)
  where = _where(c, where)
  log_q, log_1mq = chain_log_probs(
    c,
    _safe_log(a),
    _safe_log(1.0 - a),
    log_continue_no_click=_safe_log(jnp.asarray(c0, jnp.float32)),
    log_continue_click=_safe_log(jnp.asarray(c1, jnp.float32)),
    where=where,
  )
  return log_q, log_1mq, where


def chain_conditional_click_prob(
  clicks: Array,
  attraction: Array,
  *,
  continue_no_click: Array | float,
  continue_click: Array | float,
  where: Optional[Array] = None,
) -> Array:
  r"""Conditional click probabilities :math:`P(C_i = 1 \mid c_{<i})` of a click chain (cascade, DCM, DBN, CCM).

  With :math:`\epsilon_i = P(E_i = 1 \mid c_{<i})`, the filter

  .. math::
      q_i = \epsilon_i a_i, \qquad \epsilon_1 = 1, \qquad
      \epsilon_{i+1} = \begin{cases} c^1_i & c_i = 1 \\
        c^0_i\,\dfrac{\epsilon_i (1 - a_i)}{1 - \epsilon_i a_i} & c_i = 0 \end{cases}

  run by ``lax.scan`` in log space (Chapelle & Zhang WWW'09 for the DBN;
  Guo et al. WSDM'09 for the DCM and WWW'09 for the CCM). Continuations come
  from :func:`chain_continuations`.

  Args:
    clicks: ``[..., L]`` observed 0/1 clicks, in displayed order.
    attraction: ``[..., L]`` click probability given examination.
    continue_no_click, continue_click: :math:`c^0, c^1`, scalars or ``[..., L]``.
    where: ``bool[..., L]`` (masked items are skipped).

  Returns:
    ``float32[..., L]`` (0 where masked).

  >>> # DCM (c0 = 1, c1 = 0.5): after a click at 1 the user is at 2 w.p. 0.5
  >>> q = chain_conditional_click_prob(jnp.array([1.0, 0.0, 0.0]), jnp.full(3, 0.5),
  ...                                  continue_no_click=1.0, continue_click=0.5)
  >>> print([round(float(v), 4) for v in q])  # at 3: P(E_3 | no click at 2) = 0.5 * 0.5 / 0.75
  [0.5, 0.25, 0.1667]
  """
  log_q, _, where = _chain_log_q(clicks, attraction, continue_no_click, continue_click, where)
  return jnp.where(where, jnp.exp(log_q), 0.0)


def chain_log_likelihood(
  clicks: Array,
  attraction: Array,
  *,
  continue_no_click: Array | float,
  continue_click: Array | float,
  where: Optional[Array] = None,
) -> Array:
  r"""Session log-likelihood of a click chain: :math:`\sum_i \log P(c_i \mid c_{<i})`.

  See :func:`chain_conditional_click_prob`; computed from :math:`\log q` and
  :math:`\log(1 - q)` without leaving log space.

  Args:
    clicks, attraction, continue_no_click, continue_click, where: as
      :func:`chain_conditional_click_prob`.

  Returns:
    ``float32[...]`` log-likelihood per session (0 for a fully masked list).

  >>> # the cascade: a click at 2 means no click at 1, then nothing can follow
  >>> ll = chain_log_likelihood(jnp.array([0.0, 1.0, 0.0]), jnp.full(3, 0.5),
  ...                           continue_no_click=1.0, continue_click=0.0)
  >>> print(round(float(ll), 6), round(float(jnp.log(0.25)), 6))
  -1.386294 -1.386294
  """
  log_q, log_1mq, where = _chain_log_q(clicks, attraction, continue_no_click, continue_click, where)
  return bernoulli_log_likelihood(clicks, log_q, log_1mq, where=where)


def ubm_log_probs(
  clicks: Array,
  log_attraction: Array,
  log_gamma: Array,
  *,
  ranks: Optional[Array] = None,
  where: Optional[Array] = None,
) -> tuple[Array, Array]:
  r"""Log conditional click and no-click probabilities of the UBM, from log-space parameters.

  :math:`\log q_i = \log\gamma[r_i, l_i] + \log a_i` (see
  :func:`ubm_conditional_click_prob`), for learners that hold logits.

  Args:
    clicks: ``[..., L]`` 0/1 clicks, in displayed order.
    log_attraction: ``[..., L]`` :math:`\log a`.
    log_gamma: ``[K, K + 1]`` :math:`\log\gamma` (ranks and states beyond it
      are clipped to its last row and column).
    ranks: ``int[..., L]`` 0-based ranks (default ``arange(L)``).
    where: ``bool[..., L]``.

  Returns:
    ``(log_q, log_1mq)``, each ``float32[..., L]``.

  >>> log_q, _ = ubm_log_probs(jnp.array([1.0, 0.0]), jnp.zeros(2), jnp.log(jnp.array([[0.9, 0.], [0.3, 0.8]])))
  >>> print(jnp.exp(log_q))  # rank 2 below a click at rank 1: gamma[1, 1]
  [0.9 0.8]
  """
  c = jnp.asarray(clicks, jnp.float32)
  log_a = jnp.broadcast_to(jnp.asarray(log_attraction, jnp.float32), c.shape)
  log_gamma = jnp.asarray(log_gamma, jnp.float32)
  where = _where(c, where)
  length = c.shape[-1]
  ranks = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32) if ranks is None else jnp.asarray(ranks), c.shape)
  # The last-click state above each item: 0 = none, rank + 1 of the last click (exclusive cummax).
  state = jnp.where(where & (c > 0.5), ranks + 1, 0)
  state = jax.lax.cummax(state, axis=c.ndim - 1)
  state = jnp.concatenate([jnp.zeros_like(state[..., :1]), state[..., :-1]], axis=-1)
  k, s = log_gamma.shape
  log_q = log_gamma[jnp.clip(ranks, 0, k - 1), jnp.clip(state, 0, s - 1)] + log_a
  return log_q, _log1mexp(log_q)


def _ubm_log_q(clicks, attraction, gamma, ranks, where):
  c = jnp.asarray(clicks, jnp.float32)
  a = jnp.broadcast_to(jnp.asarray(attraction, jnp.float32), c.shape)
  where = _where(c, where)
  log_q, log_1mq = ubm_log_probs(c, _safe_log(a), _safe_log(jnp.asarray(gamma, jnp.float32)), ranks=ranks, where=where)
  return log_q, log_1mq, where


def ubm_conditional_click_prob(
  clicks: Array, attraction: Array, gamma: Array, *, ranks: Optional[Array] = None, where: Optional[Array] = None
) -> Array:
  r"""Conditional click probabilities of the user browsing model (Dupret & Piwowarski SIGIR'08).

  .. math::
      P(C_i = 1 \mid c_{<i}) = \gamma[r_i, l_i]\, a_i, \qquad
      l_i = 1 + \max\{r_j : j < i,\ c_j = 1\}\ (0 \text{ without a click})

  (the state convention of :func:`~ultr_jax.simulation.ubm_gamma`), with
  :math:`l` from one exclusive ``cummax``.

  Args:
    clicks: ``[..., L]`` 0/1 clicks, in displayed order.
    attraction: ``[..., L]`` click probability given examination.
    gamma: ``[K, K + 1]`` examination table (ranks and states beyond it are
      clipped to its last row and column).
    ranks: ``int[..., L]`` 0-based ranks (default ``arange(L)``).
    where: ``bool[..., L]``.

  Returns:
    ``float32[..., L]`` (0 where masked).

  >>> from ultr_jax.simulation import ubm_gamma
  >>> q = ubm_conditional_click_prob(jnp.array([1.0, 0.0, 0.0]), jnp.ones(3), jnp.asarray(ubm_gamma(3)))
  >>> print(q)  # rank 2 is one below the click (0.68), rank 3 two below (0.61)
  [0.68 0.68 0.61]
  """
  log_q, _, where = _ubm_log_q(clicks, attraction, gamma, ranks, where)
  return jnp.where(where, jnp.exp(log_q), 0.0)


def ubm_log_likelihood(
  clicks: Array, attraction: Array, gamma: Array, *, ranks: Optional[Array] = None, where: Optional[Array] = None
) -> Array:
  r"""Session log-likelihood of the UBM: :math:`\sum_i \log P(c_i \mid c_{<i})`.

  See :func:`ubm_conditional_click_prob`.

  Returns:
    ``float32[...]`` log-likelihood per session.

  >>> from ultr_jax.simulation import ubm_gamma
  >>> ll = ubm_log_likelihood(jnp.array([1.0, 0.0]), jnp.ones(2), jnp.asarray(ubm_gamma(2)))
  >>> print(round(float(ll), 6), round(float(jnp.log(0.68 * 0.32)), 6))
  -1.525097 -1.525097
  """
  log_q, log_1mq, where = _ubm_log_q(clicks, attraction, gamma, ranks, where)
  return bernoulli_log_likelihood(clicks, log_q, log_1mq, where=where)


def logit_bias_shapes(model: str, num_ranks: int) -> dict[str, tuple[int, ...]]:
  """Shapes of the bias logits :func:`logit_log_probs` reads for ``model`` over ``num_ranks`` ranks.

  >>> logit_bias_shapes("ubm", 3)
  {'gamma': (3, 4)}
  """
  return _fittable(model).bias_shapes(num_ranks)


def _fittable(model):
  fittable = click_models("fittable")
  if model not in fittable and not (hasattr(model, "fittable") and model.fittable):
    raise ValueError(f"unknown click model {model!r} (expected one of {fittable})")
  return get_click_model(model)


def log_probs_from_logs(
  model: str,
  clicks: Array,
  log_attraction: Array,
  log_no_attraction: Array,
  log_bias: dict,
  *,
  ranks: Optional[Array] = None,
  where: Optional[Array] = None,
) -> tuple[Array, Array]:
  r"""Log conditional click / no-click probabilities of any session click model from log-probabilities.

  The one switch over the models behind :func:`logit_log_probs` (and the
  click-model fits, which take ``log_sigmoid`` of their parameter vectors once
  and gather the results per item; on CPU that is several times faster than
  transcendentals per item). ``log_bias`` holds log-probabilities:

  =======  =============================================================================
  model    ``log_bias``
  =======  =============================================================================
  pbm      ``examination[K]`` :math:`\log o`
  ubm      ``gamma[K, K + 1]`` :math:`\log\gamma`
  cascade  none
  dcm      ``continuation[K]`` :math:`\log\lambda`
  dbn      ``perseverance[]`` :math:`\log\gamma`, ``no_satisfaction[..., L]`` :math:`\log(1 - \sigma_i)` per item
  ccm      ``alpha[3]`` :math:`\log\alpha`
  trust    ``examination[K]`` :math:`\log o`, ``trust[K]`` :math:`\log \rho`
  sdbn     ``no_satisfaction[..., L]`` :math:`\log(1 - \sigma_i)` per item
  mixture  ``weights[M]`` :math:`\log w`, each component's under ``c<m>.<name>``
  =======  =============================================================================

  Tables are indexed by ``ranks`` (default: the item index; ranks beyond a
  table use its last entry).

  Args:
    model: a fittable click model of the registry (a name of ``LOGIT_MODELS`` or a
      :class:`~ultr_jax.simulation.ClickModel`); its :meth:`~ultr_jax.simulation.ClickModel.log_probs`.
    clicks: ``[..., L]`` 0/1 clicks, in displayed order.
    log_attraction, log_no_attraction: ``[..., L]`` :math:`\log a`, :math:`\log(1 - a)`.
    log_bias: dict as above.
    ranks: ``int[..., L]``.
    where: ``bool[..., L]``.

  Returns:
    ``(log_q, log_1mq)``, each ``float32[..., L]``.

  >>> half = jnp.log(jnp.full(2, 0.5))
  >>> log_q, _ = log_probs_from_logs("dcm", jnp.array([1.0, 0.0]), half, half, {"continuation": half})
  >>> print(jnp.exp(log_q))
  [0.5  0.25]
  """
  m = _fittable(model)
  c = jnp.asarray(clicks, jnp.float32)
  log_a = jnp.broadcast_to(jnp.asarray(log_attraction, jnp.float32), c.shape)
  log_1ma = jnp.broadcast_to(jnp.asarray(log_no_attraction, jnp.float32), c.shape)
  return m.log_probs(c, log_a, log_1ma, log_bias, ranks=ranks, where=_where(c, where))


def log_bias_from_logits(
  model: str, bias_logits: dict, *, satisfaction_logits: Optional[Array] = None, item_logits: Optional[dict] = None
) -> dict:
  """The ``log_bias`` of :func:`log_probs_from_logs` from the bias logits and the per-item logits of the model's
  :attr:`~ultr_jax.simulation.ClickModel.item_params` (``item_logits``; ``satisfaction_logits`` is the DBN's
  and SDBN's): the model's :meth:`~ultr_jax.simulation.ClickModel.log_bias` (``log_sigmoid`` of each logit).

  >>> print(log_bias_from_logits("dcm", {"continuation": jnp.zeros(2)})["continuation"])
  [-0.6931472 -0.6931472]
  """
  items = dict(item_logits or {})
  if satisfaction_logits is not None:
    items["satisfaction"] = satisfaction_logits
  items = {
    k: (jax.nn.log_sigmoid(jnp.asarray(v, jnp.float32)), jax.nn.log_sigmoid(-jnp.asarray(v, jnp.float32)))
    for k, v in items.items()
  }
  return _fittable(model).log_bias(bias_logits, items)


def logit_log_probs(
  model: str,
  clicks: Array,
  attraction_logits: Array,
  bias_logits: dict,
  *,
  ranks: Optional[Array] = None,
  where: Optional[Array] = None,
  satisfaction_logits: Optional[Array] = None,
  item_logits: Optional[dict] = None,
) -> tuple[Array, Array]:
  r"""Log conditional click / no-click probabilities of a click model whose parameters are logits.

  Every probability is :math:`\sigma` of a logit and enters only through
  ``log_sigmoid``, so learners (a fitted click model, a relevance tower as
  the attraction) stay in log space at any logit:

  =======  ==============================  ===========================================================
  model    ``bias_logits``                 conditional click probability
  =======  ==============================  ===========================================================
  pbm      ``examination[K]``              :math:`\sigma(o_{r_i})\,a_i`
  ubm      ``gamma[K, K + 1]``             :math:`\sigma(\gamma_{r_i, l_i})\,a_i` (:func:`ubm_log_probs`)
  cascade  none                            chain with :math:`c^0 = 1, c^1 = 0`
  dcm      ``continuation[K]``             chain with :math:`c^0 = 1, c^1 = \sigma(\lambda_{r_i})`
  dbn      ``perseverance[]``              chain with :math:`c^0 = \sigma(g), c^1 = \sigma(g)\,\sigma(-u_i)`
  ccm      ``alpha[3]``                    chain with :math:`c^0 = \sigma(\alpha_1), c^1 = \sigma(\alpha_2)(1 - a_i) + \sigma(\alpha_3) a_i`
  trust    ``examination[K]``,             :math:`\sigma(o_{r_i})\,[a_i + \sigma(t_{r_i})(1 - a_i)]` (independent clicks)
           ``trust[K]``
  sdbn     none                            chain with :math:`c^0 = 1, c^1 = \sigma(-u_i)`
  mixture  ``weights[M]``, ``c<m>.*``      the posterior-weighted filter of :func:`~ultr_jax.simulation.mixture_log_probs`
  =======  ==============================  ===========================================================

  with :math:`a_i = \sigma(s_i)` and, for the DBN, satisfaction logits
  :math:`u_i` (:func:`chain_log_probs` for the chains;
  :func:`log_probs_from_logs` does the work).

  Args:
    model: a fittable click model of the registry (name or :class:`~ultr_jax.simulation.ClickModel`).
    clicks: ``[..., L]`` 0/1 clicks, in displayed order.
    attraction_logits: ``[..., L]`` :math:`s`.
    bias_logits: dict of the model's logits (:func:`logit_bias_shapes`).
    ranks: ``int[..., L]`` 0-based ranks for the tables (default ``arange(L)``).
    where: ``bool[..., L]``.
    satisfaction_logits: ``[..., L]`` :math:`u` (``dbn``, ``sdbn``).
    item_logits: ``{name: [..., L]}`` logits of the model's per-item parameters
      (:attr:`~ultr_jax.simulation.ClickModel.item_params`; ``satisfaction_logits`` is one of them).

  Returns:
    ``(log_q, log_1mq)``, each ``float32[..., L]``.

  >>> log_q, _ = logit_log_probs("dcm", jnp.array([1.0, 0.0]), jnp.zeros(2), {"continuation": jnp.zeros(2)})
  >>> print(jnp.exp(log_q))  # a = 1/2; after the click the user goes on w.p. 1/2
  [0.5  0.25]
  """
  s = jnp.asarray(attraction_logits, jnp.float32)
  log_bias = log_bias_from_logits(model, bias_logits, satisfaction_logits=satisfaction_logits, item_logits=item_logits)
  return log_probs_from_logs(
    model, clicks, jax.nn.log_sigmoid(s), jax.nn.log_sigmoid(-s), log_bias, ranks=ranks, where=where
  )
