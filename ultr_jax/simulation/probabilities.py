r"""Relevance and examination probabilities of the simulated users.

Every function is pure, elementwise over ``[..., list_size]`` and jittable.
Positions are **0-based** displayed ranks (item ``i`` of a list sits at
position ``i`` unless the batch carries ``positions``); the papers' 1-based
rank is ``position + 1``.

Relevance (the probability of a click given examination) follows the
ERR-style mapping of Chapelle et al. (CIKM 2009) used by ULTRA and by the
Identifiability (ICML'24), LBD (NeurIPS'22) and SIF specs:

.. math::
    r(y) = \epsilon^- + (\epsilon^+ - \epsilon^-)\,
           \frac{2^{y} - 1}{2^{y_{\max}} - 1}.

With :math:`\epsilon^- = 0.1, \epsilon^+ = 1, y_{\max} = 4` this gives
``[0.1, 0.16, 0.28, 0.52, 1.0]`` for ``y = 0..4`` (LBD 4.3, SIF 6.2, the
semi-synthetic identifiability study); the fully synthetic identifiability
code uses ``ymax = 5`` (``[0.1, 0.129, 0.187, 0.303, 0.535]``, its
ambiguity A1). The binary variant (CLD 2.6) maps ``y >= threshold`` to
:math:`\epsilon^+` and the rest to :math:`\epsilon^-`.
"""

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax.types import Array

__all__ = [
  "ULTRA_EXAM_TABLE",
  "IDENTIFIABILITY_CONTEXT_W",
  "relevance_probability",
  "binary_relevance_probability",
  "pbm_examination",
  "pbm_table_examination",
  "trust_bias_epsilons",
  "context_pbm_examination",
  "make_context_vectors",
  "individual_examination",
  "dcm_examination",
  "chain_examination",
  "ubm_gamma",
  "ubm_examination",
]

#: Eye-tracking examination probabilities of positions 1..10 (Joachims et
#: al. 2005) as used by ULTRA's ``position_biased_model``; positions beyond 10
#: reuse the last value.
ULTRA_EXAM_TABLE = (0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06)

#: The fixed context weight vector ``w`` of the identifiability repo's CPBM
#: ``click_model.json`` (spec-identifiability 3.2.2).
IDENTIFIABILITY_CONTEXT_W = (
  -0.13390555877443555,
  0.1988461661157539,
  -0.026005814485797307,
  -0.14176620063529133,
  -0.38422296795127564,
  0.06025565950422718,
  -0.35635814410370004,
  0.5520134349350745,
  0.6957929543729735,
  -0.46464952897752965,
)


def relevance_probability(labels: Array, *, eps: float = 0.1, eps_plus: float = 1.0, ymax: int = 4) -> Array:
  r"""ERR-style click probability given examination (Chapelle et al. 2009).

  .. math::
      r(y) = \epsilon + (\epsilon^+ - \epsilon)\,\frac{2^{y} - 1}{2^{y_{\max}} - 1}

  Labels are clipped to ``[0, ymax]`` (ULTRA reuses the last entry beyond
  ``ymax``). spec-identifiability Eq. C.1, spec-lbd Eq. 3, spec-sif 6.2.

  Args:
    labels: ``[..., L]`` graded relevance.
    eps: click noise :math:`\epsilon` (probability for ``y = 0``).
    eps_plus: probability for ``y = ymax``.
    ymax: the label mapped to ``eps_plus``.

  Returns:
    ``float32[..., L]`` probabilities.

  >>> print(np.asarray(relevance_probability(jnp.arange(5.0))).round(4))
  [0.1  0.16 0.28 0.52 1.  ]
  """
  if ymax <= 0:
    raise ValueError(f"ymax must be positive, got {ymax}")
  y = jnp.clip(jnp.asarray(labels, jnp.float32), 0.0, float(ymax))
  return eps + (eps_plus - eps) * (jnp.exp2(y) - 1.0) / (2.0**ymax - 1.0)


def binary_relevance_probability(
  labels: Array, *, threshold: float = 3.0, eps: float = 0.1, eps_plus: float = 1.0
) -> Array:
  r"""Binary click probability given examination (CLD 2.6, LBD/SIF binary variants).

  .. math::
      r(y) = \epsilon^+ \text{ if } y \ge \text{threshold else } \epsilon^-

  ``threshold=3`` binarises grades {3, 4} as relevant (the CLD paper);
  ``threshold=2`` is the CLD repo's rule ({2, 3, 4}, its ambiguity A1).

  Args:
    labels: ``[..., L]`` graded relevance.
    threshold: the smallest relevant grade.
    eps: :math:`\epsilon^-`, click probability of an irrelevant examined item.
    eps_plus: :math:`\epsilon^+`, click probability of a relevant examined item.

  Returns:
    ``float32[..., L]``.

  >>> print(binary_relevance_probability(jnp.array([0., 2., 3., 4.]), threshold=2))
  [0.1 1.  1.  1. ]
  """
  return jnp.where(jnp.asarray(labels) >= threshold, jnp.float32(eps_plus), jnp.float32(eps))


def pbm_examination(positions: Array, *, eta: float = 1.0, top_k: Optional[int] = None) -> Array:
  r"""Position-based examination :math:`(1/\mathrm{rank})^\eta` (CLD Eq. 13).

  .. math::
      o(p) = (p + 1)^{-\eta}\,\mathbb{1}[p < k] \quad (p \text{ 0-based})

  Args:
    positions: ``int[..., L]`` 0-based positions.
    eta: severity of position bias; ``eta = 0`` gives no bias.
    top_k: if set, positions ``>= top_k`` are not shown (examination 0).

  Returns:
    ``float32[..., L]``.

  >>> print(np.asarray(pbm_examination(jnp.arange(5), eta=1.0, top_k=4)).round(4))
  [1.     0.5    0.3333 0.25   0.    ]
  """
  p = jnp.asarray(positions)
  exam = jnp.exp(-eta * jnp.log1p(jnp.maximum(p, 0).astype(jnp.float32)))
  return _cut(exam, p, top_k)


def pbm_table_examination(
  positions: Array, *, eta: float = 1.0, table: Sequence[float] = ULTRA_EXAM_TABLE, top_k: Optional[int] = None
) -> Array:
  r"""Eye-tracking examination table raised to :math:`\eta` (ULTRA's PBM).

  .. math::
      o(p) = v_{\min(p, |v| - 1)}^{\,\eta}, \quad
      v = [0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06]

  Positions beyond the table reuse its last value (ULTRA ``getExamProb``).
  Used by the identifiability (C.2), LBD (4.3) and SIF (6.2) simulators.

  Args:
    positions: ``int[..., L]`` 0-based positions.
    eta: power applied to the table.
    table: per-position examination probabilities.
    top_k: if set, positions ``>= top_k`` get 0.

  Returns:
    ``float32[..., L]``.

  >>> print(np.asarray(pbm_table_examination(jnp.array([0, 9, 15]), eta=2.0)).round(4))
  [0.4624 0.0036 0.0036]
  """
  p = jnp.asarray(positions)
  log_v = _log_table(table, p)
  return _cut(jnp.exp(eta * log_v), p, top_k)


def trust_bias_epsilons(positions: Array, *, epsilon_1_neg: float = 0.65) -> tuple[Array, Array]:
  r"""Per-position trust-bias click probabilities (Vardasbi et al. CIKM'20, ULTRA).

  .. math::
      \epsilon^+_p = 1 - \frac{p + 2}{100}, \qquad
      \epsilon^-_p = \frac{\epsilon^-_1}{p + 1} \quad (p \text{ 0-based})

  and :math:`P(C = 1) = o(p)\,[\epsilon^+_p\,r(y) + \epsilon^-_p\,(1 - r(y))]`
  (ULTRA ``TrustBiasedModel.getClickProb``; spec-sif 6.2's comparability
  option; ``epsilon_1_neg = 0.65`` as in ULTRA's ``trust_bias.json``).

  Args:
    positions: ``int[..., L]`` 0-based positions.
    epsilon_1_neg: :math:`\epsilon^-` at the first position.

  Returns:
    ``(eps_plus, eps_minus)``, each ``float32[..., L]``.

  >>> ep, em = trust_bias_epsilons(jnp.array([0, 1]))
  >>> print(ep, em)
  [0.98 0.97] [0.65  0.325]
  """
  p = jnp.maximum(jnp.asarray(positions), 0).astype(jnp.float32)
  return 1.0 - (p + 2.0) / 100.0, epsilon_1_neg / (p + 1.0)


def make_context_vectors(num_contexts: int, *, dim: int = 10, scale: float = 0.35, seed: int = 0) -> np.ndarray:
  r"""Random context embeddings :math:`X_t \sim \mathcal{N}(0, 0.35^2 I)` (CPBM).

  spec-identifiability 3.2.2 (the repo's ``np.random.normal(0, scale=0.35)``:
  0.35 is the standard deviation). Host side, deterministic in ``seed``.

  Args:
    num_contexts: number of context types ``T``.
    dim: embedding size (10 in the paper).
    scale: standard deviation.
    seed: NumPy seed.

  Returns:
    ``float32[T, dim]``.

  >>> make_context_vectors(3, seed=0).shape
  (3, 10)
  """
  rng = np.random.default_rng(seed)
  return rng.normal(0.0, scale, size=(num_contexts, dim)).astype(np.float32)


def context_pbm_examination(
  positions: Array,
  context: Array,
  *,
  context_vectors: Array,
  w: Array,
  eta: float = 1.0,
  table: Sequence[float] = ULTRA_EXAM_TABLE,
  top_k: Optional[int] = None,
) -> Array:
  r"""Context-dependent PBM (CPBM, Fang et al. 2019; Identifiability C.2).

  .. math::
      o(t, p) = v_p^{\,\eta \max\{w^\top X_t + 1,\ 0\}}

  with :math:`v` the eye-tracking table, :math:`X_t \in \mathbb{R}^D` the
  embedding of context type :math:`t` and :math:`w \in \mathbb{R}^D` fixed.

  Args:
    positions: ``int[..., L]`` 0-based positions.
    context: ``int[..., L]`` context type per item, or ``int[...]`` per list
      (broadcast over the list).
    context_vectors: ``float[T, D]`` context embeddings :math:`X_t`.
    w: ``float[D]``.
    eta: extra PBM severity power (1 in the paper).
    table: per-position probabilities :math:`v`.
    top_k: if set, positions ``>= top_k`` get 0.

  Returns:
    ``float32[..., L]``.

  >>> X = jnp.array([[0.0, 0.0], [1.0, 0.0]])
  >>> o = context_pbm_examination(jnp.array([0, 0]), jnp.array([0, 1]),
  ...                             context_vectors=X, w=jnp.array([1.0, 0.0]))
  >>> print(np.asarray(o).round(4))
  [0.68   0.4624]
  """
  p = jnp.asarray(positions)
  context = jnp.asarray(context)
  if context.ndim == p.ndim - 1:
    context = jnp.broadcast_to(context[..., None], p.shape)
  x = jnp.asarray(context_vectors, jnp.float32)[context]  # [..., L, D]
  exponent = jnp.maximum(x @ jnp.asarray(w, jnp.float32) + 1.0, 0.0)
  return _cut(jnp.exp(eta * exponent * _log_table(table, p)), p, top_k)


def individual_examination(
  positions: Array,
  crux_features: Array,
  w: Array,
  *,
  eta: float = 1.0,
  table: Sequence[float] = ULTRA_EXAM_TABLE,
  top_k: Optional[int] = None,
) -> Array:
  r"""Individual-level observation of LBD (NeurIPS'22, spec-lbd 4.3).

  .. math::
      o(x, p) = v_p^{\,\eta \max\{1 + w^\top x',\ 0\}}

  with :math:`x'` the crux features of the document (the caller selects
  them) and :math:`w` the coupling vector (``w = 0`` is a plain PBM).

  Args:
    positions: ``int[..., L]`` 0-based positions.
    crux_features: ``float[..., L, D]`` the selected features :math:`x'`.
    w: ``float[D]`` coupling weights.
    eta: PBM severity power (the repo's ``"eta": 1.0``, not the coupling).
    table: per-position probabilities :math:`v`.
    top_k: if set, positions ``>= top_k`` get 0.

  Returns:
    ``float32[..., L]``.

  >>> x = jnp.array([[0.5], [-2.0]])
  >>> print(np.asarray(individual_examination(jnp.array([0, 0]), x, jnp.array([1.0]))).round(4))
  [0.5607 1.    ]
  """
  p = jnp.asarray(positions)
  exponent = jnp.maximum(1.0 + jnp.asarray(crux_features, jnp.float32) @ jnp.asarray(w, jnp.float32), 0.0)
  return _cut(jnp.exp(eta * exponent * _log_table(table, p)), p, top_k)


def chain_examination(
  attraction: Array,
  *,
  continue_no_click: Array | float,
  continue_click: Array | float,
  prior: Optional[Array] = None,
  where: Optional[Array] = None,
) -> Array:
  r"""Marginal examination of a click-chain model: DBN, CCM, DCM and cascade alike.

  Items are scanned in list order. An examined item is clicked with
  probability :math:`r_j`; the user then goes on to the next item with
  probability :math:`c^1_j` after a click and :math:`c^0_j` without one:

  .. math::
      P(E_i = 1) = \prod_{j < i} \bigl((1 - r_j)\, c^0_j + r_j\, c^1_j\bigr)

  (DBN: :math:`c^0 = \gamma`, :math:`c^1 = \gamma (1 - \sigma_j)`; CCM:
  :math:`c^0 = \alpha_1`, :math:`c^1 = \alpha_2 (1 - r_j) + \alpha_3 r_j`;
  DCM: :math:`c^0 = 1`, :math:`c^1 = \lambda_j`), in log space with an
  exclusive cumulative sum. Masked items are skipped.

  Args:
    attraction: ``[..., L]`` click probability given examination, in
      displayed order.
    continue_no_click, continue_click: :math:`c^0, c^1`, scalars or
      ``[..., L]``.
    prior: optional ``[..., L]`` examination ceiling (e.g. 0 beyond top-k);
      multiplies the result and gates the stopping of unshown items.
    where: ``bool[..., L]``.

  Returns:
    ``float32[..., L]`` (0 where masked).

  >>> e = chain_examination(jnp.array([0.5, 0.5, 0.5]), continue_no_click=0.9, continue_click=0.4)
  >>> print([round(float(v), 6) for v in e])
  [1.0, 0.65, 0.4225]
  """
  r = jnp.asarray(attraction, jnp.float32)
  if where is None:
    where = jnp.ones(r.shape, bool)
  gate = where if prior is None else where & (jnp.asarray(prior) > 0)
  keep = (1.0 - r) * jnp.asarray(continue_no_click, jnp.float32) + r * jnp.asarray(continue_click, jnp.float32)
  log_keep = jnp.where(gate, jnp.log(jnp.clip(keep, 0.0, 1.0)), 0.0)  # -inf where keep == 0
  return _exclusive_survival(log_keep, where, prior)


def dcm_examination(
  attraction: Array, *, continuation: Array | float = 0.0, prior: Optional[Array] = None, where: Optional[Array] = None
) -> Array:
  r"""Marginal examination of the cascade / dependent click model (DCM).

  Items are scanned in list order. An examined item is clicked with
  probability :math:`r_j`; after a click the user continues with
  probability :math:`\lambda_j`, otherwise always (Guo et al. WSDM'09;
  the cascade model of Craswell et al. 2008 is :math:`\lambda = 0`):

  .. math::
      P(E_i = 1) = \prod_{j < i} \bigl(1 - r_j\,(1 - \lambda_j)\bigr)

  computed in log space with an exclusive cumulative sum. Masked items are
  skipped (they neither stop the user nor get examined).

  Args:
    attraction: ``[..., L]`` click probability given examination :math:`r`,
      in displayed order.
    continuation: :math:`\lambda`, scalar or ``[..., L]``.
    prior: optional ``[..., L]`` examination ceiling (e.g. 0 beyond top-k);
      multiplies the result and gates the stopping of unshown items.
    where: ``bool[..., L]``.

  Returns:
    ``float32[..., L]`` (0 where masked).

  >>> print(dcm_examination(jnp.array([0.5, 0.5, 0.5]), continuation=0.5))
  [1.     0.75   0.5625]
  """
  r = jnp.asarray(attraction, jnp.float32)
  if where is None:
    where = jnp.ones(r.shape, bool)
  gate = where if prior is None else where & (jnp.asarray(prior) > 0)
  stop = jnp.where(gate, r * (1.0 - jnp.asarray(continuation, jnp.float32)), 0.0)
  log_keep = jnp.log1p(-jnp.minimum(stop, 1.0))  # may be -inf where stop == 1
  return _exclusive_survival(log_keep, where, prior)


def _exclusive_survival(log_keep, where, prior):
  r""":math:`\prod_{j<i} k_j` from :math:`\log k` by an exclusive cumulative sum (times ``prior``; 0 where masked)."""
  csum = jnp.cumsum(log_keep, axis=-1)
  exclusive = jnp.concatenate([jnp.zeros_like(csum[..., :1]), csum[..., :-1]], axis=-1)
  exam = jnp.exp(exclusive)
  if prior is not None:
    exam = exam * prior
  return jnp.where(where, exam, 0.0)


def _log_table(table: Sequence[float], positions: Array) -> Array:
  log_v = jnp.log(jnp.asarray(table, jnp.float32))
  return log_v[jnp.clip(positions, 0, log_v.shape[0] - 1)]


def _cut(exam: Array, positions: Array, top_k: Optional[int]) -> Array:
  if top_k is None:
    return exam
  return jnp.where(positions < top_k, exam, 0.0)


def ubm_gamma(num_positions: int, *, eta: float = 1.0, table: Sequence[float] = ULTRA_EXAM_TABLE) -> np.ndarray:
  r"""The UBM examination table :math:`\gamma_{r,d}` in its distance form, ``[K, K + 1]``.

  Dupret & Piwowarski (SIGIR'08) let examination depend on the rank
  :math:`r` and the distance :math:`d = r - r'` to the last clicked rank
  :math:`r'` (:math:`r' = 0` without a click). This default reads the
  distance off the PBM table,

  .. math::
      \gamma_{r,d} = v_{\min(d, |v|) - 1}^{\,\eta}

  so before any click it is the PBM of :func:`pbm_table_examination`, and
  just below a click it restarts at :math:`v_0`. Row ``p`` (0-based rank)
  and column ``last`` (0 = no click yet, ``j + 1`` = last click at rank
  ``j``) hold :math:`\gamma_{p+1,\,p+1-\mathrm{last}}`; entries with
  ``last > p`` cannot occur and are 0.

  >>> g = ubm_gamma(3)
  >>> print(g)
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


def ubm_examination(
  attraction: Array, gamma: Array, *, ranks: Optional[Array] = None, where: Optional[Array] = None
) -> Array:
  r"""Marginal examination of the user browsing model (UBM), items in displayed order.

  With :math:`\pi_j(l)` the probability that, before the ``j``-th displayed
  item, the last click was at state ``l`` (0 = none, ``i + 1`` = rank ``i``),

  .. math::
      P(E_j = 1) = \sum_l \pi_j(l)\,\gamma[r_j, l], \qquad
      \pi_{j+1}(l) = \pi_j(l)\bigl(1 - \gamma[r_j, l]\,a_j\bigr)
        + \mathbb{1}[l = r_j + 1] \sum_{l'} \pi_j(l')\,\gamma[r_j, l']\,a_j

  one ``lax.scan`` step per displayed item over a state of ``L + 1``
  probabilities (exact; no sampling). Masked items are skipped.

  Args:
    attraction: ``[..., L]`` click probability given examination, in
      displayed order.
    gamma: ``[K, K + 1]`` table (:func:`ubm_gamma`); ranks and states beyond
      it are clipped to its last row and column.
    ranks: ``int[..., L]`` 0-based ranks of the items (increasing along the
      list; default ``arange(L)``).
    where: ``bool[..., L]``.

  Returns:
    ``float32[..., L]`` (0 where masked).

  >>> g = jnp.asarray(ubm_gamma(3))
  >>> # rank 2: no click yet w.p. 0.32 (then 0.61), a click at rank 1 w.p. 0.68 (then 0.68)
  >>> print(np.asarray(ubm_examination(jnp.array([1.0, 1.0, 1.0]), g)).round(4))
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
