r"""The context-dependent position-based model (Fang et al. 2019; Identifiability, ICML'24, C.2)."""

import dataclasses
from typing import Optional, Sequence

import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp  # noqa: F401 (the doctests')
import numpy as np

from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models.base import ClickModel, Session, prepare
from ultr_jax.simulation.click_models.pbm import table_kwargs
from ultr_jax.types import Array, PRNGKey

__all__ = ["context_pbm", "ContextPBM", "IDENTIFIABILITY_CONTEXT_W"]

#: The fixed context weight vector ``w`` of the identifiability repo's CPBM ``click_model.json`` (Identifiability
#: Matters, ICML'24, Appendix C.2): :class:`ContextPBM`'s default ``w``.
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
    context_vectors: ``float[T, D]`` (:meth:`ContextPBM.make_context_vectors`).
    w: ``float[D]``.
    where: ``bool[..., L]`` valid items (default all); masked items never click.
    positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
    eta: power of the examination table (position-bias severity).
    table: per-position examination probabilities :math:`v` (default ULTRA's; positions beyond it reuse its last
      value).
    top_k: display cut-off (``shown`` is returned); None: every valid item is shown.
    num_sessions: if set, a leading axis of that many independent sessions.
    num_impressions: if set, aggregated mode: ``clicks`` are CTRs over that many impressions of each item's
      marginal click probability.

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see :mod:`ultr_jax.simulation.click_models`.

  >>> out = context_pbm(jax.random.key(0), jnp.ones(2), jnp.array(1),
  ...                   context_vectors=jnp.array([[0.0], [1.0]]), w=jnp.array([1.0]))
  >>> print(np.asarray(out["examination"]).round(4))
  [0.4624 0.3721]
  """
  session = ContextPBM().session(
    attraction,
    where=where,
    positions=positions,
    top_k=top_k,
    context=context,
    context_vectors=context_vectors,
    w=w,
    eta=eta,
    table=table,
  )
  return session.output(key, num_sessions, num_impressions)


@dataclasses.dataclass(frozen=True)
class ContextPBM(ClickModel):
  r"""The context-dependent PBM; simulation only. Reads ``batch["context"]``; config ``context_vectors``
  ``[T, D]`` or ``num_contexts`` (+ ``context_dim`` 10, ``context_scale`` 0.35, ``context_seed`` 0), ``w``
  (default the identifiability repo's vector), ``eta`` and ``table``.

  >>> ContextPBM().batch_inputs
  ('context',)
  """

  name = "context_pbm"
  config_keys = {
    "eta": 1.0,
    "table": P.ULTRA_EXAM_TABLE,
    "context_vectors": None,
    "num_contexts": None,
    "context_dim": 10,
    "context_scale": 0.35,
    "context_seed": 0,
    "w": IDENTIFIABILITY_CONTEXT_W,
  }
  batch_inputs = ("context",)
  fittable = False
  loss = False

  def simulation_kwargs(self, cfg):
    """The contextual PBM's :meth:`session` keyword arguments: ``context_vectors`` (given, or
    drawn from ``num_contexts``, ``context_dim``, ``context_scale``, ``context_seed``), ``w``, ``eta``, ``table``.

    Args:
      cfg: the (checked) simulation config, a mapping (None values: not set, the default applies).

    Returns:
      dict with ``context_vectors`` (``float32[T, D]``), ``w`` (``float32[D]``) ``eta`` (default 1.0) and ``table`` when set.

    Raises:
      ValueError: without ``context_vectors`` or ``num_contexts``, or for a ``w`` not of shape ``[D]``.
    """
    if "context_vectors" in cfg:
      vectors = np.asarray(cfg["context_vectors"], np.float32)
    elif "num_contexts" in cfg:
      vectors = self.make_context_vectors(
        int(cfg["num_contexts"]),
        dim=int(cfg.get("context_dim", 10)),
        scale=float(cfg.get("context_scale", 0.35)),
        seed=int(cfg.get("context_seed", 0)),
      )
    else:
      raise ValueError("click_model: context_pbm needs context_vectors or num_contexts")
    w = np.asarray(cfg.get("w", IDENTIFIABILITY_CONTEXT_W), np.float32)
    if w.shape != (vectors.shape[1],):
      raise ValueError(f"click_model.w: shape {w.shape} does not match context_dim {vectors.shape[1]}")
    return {**table_kwargs(cfg), "context_vectors": vectors, "w": w}

  def session(
    self,
    attraction,
    *,
    where=None,
    positions=None,
    top_k=None,
    context,
    context_vectors,
    w,
    eta=1.0,
    table=P.ULTRA_EXAM_TABLE,
  ):
    """The contextual PBM's ``Session`` (:meth:`examination`).

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      context: ``int[..., L]`` context type per item, or ``int[...]`` per list.
      context_vectors: ``float[T, D]`` context embeddings :math:`X_t`.
      w: ``float[D]``.
      eta: power of the examination table (position-bias severity).
      table: per-position examination probabilities :math:`v` (positions beyond it reuse its last value).

    Returns:
      The ``Session``.
    """
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    exam = self.examination(positions, context, context_vectors=context_vectors, w=w, eta=eta, table=table)
    return Session(exam, exam * r, shown, True, top_k=top_k)

  @staticmethod
  def examination(
    positions: Array,
    context: Array,
    *,
    context_vectors: Array,
    w: Array,
    eta: float = 1.0,
    table: Sequence[float] = P.ULTRA_EXAM_TABLE,
    top_k: Optional[int] = None,
  ) -> Array:
    r"""Context-dependent examination (CPBM, Fang et al. 2019; Identifiability C.2).

    .. math::
        o(t, p) = v_p^{\,\eta \max\{w^\top X_t + 1,\ 0\}}

    with :math:`v` the eye-tracking table, :math:`X_t \in \mathbb{R}^D` the embedding of context type
    :math:`t` and :math:`w \in \mathbb{R}^D` fixed.

    Args:
      positions: ``int[..., L]`` 0-based positions.
      context: ``int[..., L]`` context type per item, or ``int[...]`` per list (broadcast over the list).
      context_vectors: ``float[T, D]`` context embeddings :math:`X_t`.
      w: ``float[D]``.
      eta: extra PBM severity power (1 in the paper).
      table: per-position probabilities :math:`v`.
      top_k: if set, positions ``>= top_k`` get 0.

    Returns:
      ``float32[..., L]``.

    >>> X = jnp.array([[0.0, 0.0], [1.0, 0.0]])
    >>> o = ContextPBM.examination(jnp.array([0, 0]), jnp.array([0, 1]), context_vectors=X, w=jnp.array([1.0, 0.0]))
    >>> print(np.asarray(o).round(4))
    [0.68   0.4624]
    """
    p = jnp.asarray(positions)
    context = jnp.asarray(context)
    if context.ndim == p.ndim - 1:
      context = jnp.broadcast_to(context[..., None], p.shape)
    x = jnp.asarray(context_vectors, jnp.float32)[context]  # [..., L, D]
    exponent = jnp.maximum(x @ jnp.asarray(w, jnp.float32) + 1.0, 0.0)
    return P.cut_at(jnp.exp(eta * exponent * P.log_table(table, p)), p, top_k)

  @staticmethod
  def make_context_vectors(num_contexts: int, *, dim: int = 10, scale: float = 0.35, seed: int = 0) -> np.ndarray:
    r"""Random context embeddings :math:`X_t \sim \mathcal{N}(0, 0.35^2 I)` (CPBM).

    Identifiability (ICML'24) C.2 (the repo's ``np.random.normal(0, scale=0.35)``: 0.35 is the standard
    deviation). Host side, deterministic in ``seed``.

    Args:
      num_contexts: number of context types ``T``.
      dim: embedding size (10 in the paper).
      scale: standard deviation.
      seed: NumPy seed.

    Returns:
      ``float32[T, dim]``.

    >>> ContextPBM.make_context_vectors(3, seed=0).shape
    (3, 10)
    """
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, scale, size=(num_contexts, dim)).astype(np.float32)
