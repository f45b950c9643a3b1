r"""Stateful estimators as optax-style ``(init, update)`` pairs of pure functions.

Some ULTR methods carry non-trained state from step to step: Regression-EM's
propensities (the closed-form M-step), PairD's bias ratios :math:`t^\pm`, SIF's
dual-ascent multiplier and its EMA. The losses stay pure (they read the state
through named inputs such as ``propensities=`` or ``t_plus=``); the state and
its update live in an :class:`Estimator`, as an optax ``GradientTransformation``
holds an optimiser's:

.. code-block:: python

    est = losses.regression_em_estimator(num_positions=10)
    state = est.init()                      # a pytree (a NamedTuple of arrays)
    loss = losses.regression_em_loss(scores, clicks, propensities=state.propensities[positions])
    state = est.update(state, scores, clicks, positions=positions, where=where)

``update`` is pure and jit-able; no gradient flows through the state.
"""

from typing import NamedTuple

from ultr_jax.types import EstimatorInitFn, EstimatorUpdateFn

__all__ = ["Estimator"]


class Estimator(NamedTuple):
  """A stateful estimator: ``init(...) -> state`` and ``update(state, ...) -> state``, both pure.

  The state is a pytree (each estimator's own NamedTuple); see
  :func:`~ultr_jax.losses.regression_em_estimator`,
  :func:`~ultr_jax.losses.pairwise_debiasing_estimator` and
  :func:`~ultr_jax.losses.dual_ascent_estimator`.

  >>> counter = Estimator(init=lambda: 0, update=lambda state: state + 1)
  >>> counter.update(counter.update(counter.init()))
  2
  """

  init: EstimatorInitFn
  update: EstimatorUpdateFn
