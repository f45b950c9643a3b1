r"""The individual-level observation model of LBD (Chen et al., NeurIPS'22)."""

import dataclasses
from typing import Optional, Sequence

import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp
import numpy as np

from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models.base import ClickModel, Session, prepare
from ultr_jax.simulation.click_models.pbm import table_kwargs
from ultr_jax.types import Array, PRNGKey

__all__ = ["individual", "Individual"]


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
  r"""Individual-level observation model of LBD (Chen et al., NeurIPS'22).

  .. math::
      P(C_i = 1) = v_{p_i}^{\,\eta \max\{1 + w^\top x'_i,\ 0\}}\; r_i

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    crux_features: ``float[..., L, D]`` the crux features :math:`x'`.
    w: ``float[D]`` coupling vector (0 gives ULTRA's PBM).
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

  >>> out = individual(jax.random.key(0), jnp.ones(2), jnp.zeros((2, 3)), jnp.ones(3))
  >>> print(out["examination"])
  [0.68 0.61]
  """
  session = Individual().crux_session(
    attraction, crux_features, w, where=where, positions=positions, top_k=top_k, eta=eta, table=table
  )
  return session.output(key, num_sessions, num_impressions)


@dataclasses.dataclass(frozen=True)
class Individual(ClickModel):
  r"""The individual-level model; simulation only. Reads ``batch["features"]`` (its ``crux_indices``
  columns are :math:`x'`); config ``crux_indices``, ``w`` (both required), ``eta`` and ``table``.

  >>> Individual().batch_inputs
  ('features',)
  """

  name = "individual"
  config_keys = {"eta": 1.0, "table": P.ULTRA_EXAM_TABLE, "crux_indices": None, "w": None}
  batch_inputs = ("features",)
  fittable = False
  loss = False

  def simulation_kwargs(self, cfg):
    """LBD's individual-level model's :meth:`session` keyword arguments: ``crux_indices``, ``w``, ``eta``,
    ``table``.

    Args:
      cfg: the (checked) simulation config, a mapping (None values: not set, the default applies).

    Returns:
      dict with ``crux_indices`` (a tuple of ints), ``w`` (``float32[D]``) ``eta`` (default 1.0) and ``table`` when set.

    Raises:
      ValueError: without ``crux_indices`` or ``w``, or when their shapes differ.
    """
    if "crux_indices" not in cfg or "w" not in cfg:
      raise ValueError("click_model: individual needs crux_indices and w")
    crux = np.asarray(cfg["crux_indices"], np.int32)
    w = np.asarray(cfg["w"], np.float32)
    if w.shape != crux.shape:
      raise ValueError(f"click_model.w: shape {w.shape} does not match crux_indices {crux.shape}")
    return {**table_kwargs(cfg), "crux_indices": tuple(int(i) for i in crux), "w": w}

  def session(
    self,
    attraction,
    *,
    where=None,
    positions=None,
    top_k=None,
    features,
    crux_indices,
    w,
    eta=1.0,
    table=P.ULTRA_EXAM_TABLE,
  ):
    """LBD's individual-level observation model's ``Session``.

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      features: ``float[..., L, F]`` the items' features.
      crux_indices: indices into the last axis of ``features`` selecting the crux features :math:`x'` (``D``).
      w: ``float[D]`` coupling vector (0 gives ULTRA's PBM).
      eta: power of the examination table (position-bias severity).
      table: per-position examination probabilities :math:`v` (positions beyond it reuse its last value).

    Returns:
      The ``Session``.
    """
    crux_features = jnp.asarray(features)[..., np.asarray(crux_indices, np.int32)]
    return self.crux_session(
      attraction, crux_features, w, where=where, positions=positions, top_k=top_k, eta=eta, table=table
    )

  def crux_session(
    self, attraction, crux_features, w, *, where=None, positions=None, top_k=None, eta=1.0, table=P.ULTRA_EXAM_TABLE
  ):
    """The session from the crux features :math:`x'` ``[..., L, D]`` themselves.

    Args:
      attraction: ``[..., L]`` click probability given examination.
      crux_features: ``float[..., L, D]`` the crux features :math:`x'`.
      w: ``float[D]`` coupling vector (0 gives ULTRA's PBM).
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      eta: power of the examination table (position-bias severity).
      table: per-position examination probabilities :math:`v` (positions beyond it reuse its last value).

    Returns:
      The ``Session``.
    """
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    exam = self.examination(positions, crux_features, w, eta=eta, table=table)
    return Session(exam, exam * r, shown, True, top_k=top_k)

  @staticmethod
  def examination(
    positions: Array,
    crux_features: Array,
    w: Array,
    *,
    eta: float = 1.0,
    table: Sequence[float] = P.ULTRA_EXAM_TABLE,
    top_k: Optional[int] = None,
  ) -> Array:
    r"""Individual-level observation of LBD (Chen et al., NeurIPS'22).

    .. math::
        o(x, p) = v_p^{\,\eta \max\{1 + w^\top x',\ 0\}}

    with :math:`x'` the crux features of the document (the caller selects them) and :math:`w` the coupling
    vector (``w = 0`` is a plain PBM).

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
    >>> print(np.asarray(Individual.examination(jnp.array([0, 0]), x, jnp.array([1.0]))).round(4))
    [0.5607 1.    ]
    """
    p = jnp.asarray(positions)
    exponent = jnp.maximum(1.0 + jnp.asarray(crux_features, jnp.float32) @ jnp.asarray(w, jnp.float32), 0.0)
    return P.cut_at(jnp.exp(eta * exponent * P.log_table(table, p)), p, top_k)
