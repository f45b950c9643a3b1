r"""Relevance probabilities of the simulated users, and the position tables every click model shares.

A model's own examination lives in its module (:mod:`~ultr_jax.simulation.click_models`: e.g.
:meth:`~ultr_jax.simulation.PBM.examination`, :meth:`~ultr_jax.simulation.UBM.examination`). Every function
here is pure, elementwise over ``[..., list_size]`` and jittable.

Positions are **0-based** displayed ranks (item ``i`` of a list sits at
position ``i`` unless the batch carries ``positions``); the papers' 1-based
rank is ``position + 1``.

Relevance (the probability of a click given examination) follows the
ERR-style mapping of Chapelle et al. (CIKM 2009) used by ULTRA and by the
Identifiability (ICML'24), LBD (NeurIPS'22) and SIF papers:

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

import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp
import numpy as np  # noqa: F401 (the doctests')

from jax.typing import ArrayLike

from ultr_jax.types import Array

__all__ = [
  "ULTRA_EXAM_TABLE",
  "relevance_probability",
  "binary_relevance_probability",
  "log_table",
  "cut_at",
]

#: Eye-tracking examination probabilities of positions 1..10 (Joachims et
#: al. 2005) as used by ULTRA's ``position_biased_model``; positions beyond 10
#: reuse the last value.
ULTRA_EXAM_TABLE = (0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06)


def relevance_probability(labels: ArrayLike, *, eps: float = 0.1, eps_plus: float = 1.0, ymax: int = 4) -> Array:
  r"""ERR-style click probability given examination (Chapelle et al. 2009).

  .. math::
      r(y) = \epsilon + (\epsilon^+ - \epsilon)\,\frac{2^{y} - 1}{2^{y_{\max}} - 1}

  Labels are clipped to ``[0, ymax]`` (ULTRA reuses the last entry beyond
  ``ymax``). Identifiability (ICML'24) Eq. C.1, LBD (NeurIPS'22) Eq. 3.

  Args:
    labels: ``[..., L]`` graded relevance.
    eps: click noise :math:`\epsilon` (probability for ``y = 0``).
    eps_plus: probability for ``y = ymax``.
    ymax: the label mapped to ``eps_plus``.

  Returns:
    ``float32[..., L]`` probabilities.

  Raises:
    ValueError: if ``ymax`` is not positive.

  >>> print(np.asarray(relevance_probability(jnp.arange(5.0))).round(4))
  [0.1  0.16 0.28 0.52 1.  ]
  """
  if ymax <= 0:
    raise ValueError(f"ymax must be positive, got {ymax}")
  y = jnp.clip(jnp.asarray(labels, jnp.float32), 0.0, float(ymax))
  return eps + (eps_plus - eps) * (jnp.exp2(y) - 1.0) / (2.0**ymax - 1.0)


def binary_relevance_probability(
  labels: ArrayLike, *, threshold: float = 3.0, eps: float = 0.1, eps_plus: float = 1.0
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


def log_table(table: Sequence[float], positions: Array) -> Array:
  r""":math:`\log v_{\min(p, |v| - 1)}`: the log of a per-position table at ``positions`` (0-based; positions
  beyond the table reuse its last value, as ULTRA's ``getExamProb``).

  Args:
    table: per-position probabilities :math:`v`.
    positions: ``int[..., L]`` 0-based positions.

  Returns:
    ``float32[..., L]``.

  >>> print(np.exp(np.asarray(log_table(ULTRA_EXAM_TABLE, jnp.array([0, 9, 15])))).round(2))
  [0.68 0.06 0.06]
  """
  log_v = jnp.log(jnp.asarray(table, jnp.float32))
  return log_v[jnp.clip(positions, 0, log_v.shape[0] - 1)]


def cut_at(exam: Array, positions: Array, top_k: Optional[int]) -> Array:
  r""":math:`o_p\,\mathbb{1}[p < k]`: examination 0 at positions ``>= top_k`` (unchanged when None).

  Args:
    exam: ``[..., L]`` examination probabilities.
    positions: ``int[..., L]`` 0-based positions.
    top_k: the display cut-off :math:`k`, or None.

  Returns:
    ``exam`` with the positions beyond the cut-off zeroed.

  >>> print(cut_at(jnp.ones(3), jnp.arange(3), 2))
  [1. 1. 0.]
  """
  if top_k is None:
    return exam
  return jnp.where(positions < top_k, exam, 0.0)
