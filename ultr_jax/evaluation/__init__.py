r"""ultr_jax.evaluation: off-policy evaluation of rankers from click logs.

How would a new ranker do online, and is it better than the one that collected the log? The estimators here
answer from the logged clicks alone, with a confidence interval, over the library's layout (``[B, L]``
sessions in display order, ``where``; the target ranker as its scores of the logged items, deterministic or
Plackett-Luce with a temperature):

* :mod:`~ultr_jax.evaluation.policies`: the probabilities a policy gives the logged rankings
  (:class:`Propensities`: whole ranking, prefixes, item-position marginals exact or sampled with their standard
  error, the pseudo-inverse's pair matrix);
* :mod:`~ultr_jax.evaluation.estimators`: standard, independent and reward-interaction IPS, the pseudo-inverse
  estimator (each self-normalised on request, with a weight clip) and the click-based DCG;
* :mod:`~ultr_jax.evaluation.direct`: the direct method with a fitted click model of the registry, doubly
  robust and cascade doubly robust;
* :mod:`~ultr_jax.evaluation.registry`: :data:`ESTIMATORS`, name -> :class:`EstimatorSpec` with its declared
  inputs and the click behaviour it is unbiased under;
* :mod:`~ultr_jax.evaluation.intervals`: normal and percentile-bootstrap intervals, paired differences;
* :mod:`~ultr_jax.evaluation.truth`: the exact expected reward under a simulated click model;
* :mod:`~ultr_jax.evaluation.validation`: host-side checks and the checked entry point :func:`evaluate`.

>>> import jax.numpy as jnp
>>> from ultr_jax import evaluation
>>> b = evaluation.plackett_luce_propensities(jnp.zeros((1, 3)), temperature=1.0)
>>> est = evaluation.evaluate("rips", jnp.array([[3.0, 2.0, 1.0]]), jnp.array([[1.0, 0.0, 1.0]]), logging=b)
>>> print(round(float(est.value), 4))  # clicks at positions 1 and 3, prefix probabilities 1/3 and 1/6
9.0
"""

from ultr_jax.evaluation._common import Estimate
from ultr_jax.evaluation.direct import (
  cascade_doubly_robust,
  cascade_dr_tables,
  direct_method,
  doubly_robust,
  model_click_probabilities,
  model_examination,
)
from ultr_jax.evaluation.estimators import (
  click_dcg,
  independent_ips,
  pseudo_inverse,
  reward_interaction_ips,
  standard_ips,
  target_propensities,
)
from ultr_jax.evaluation.intervals import (
  Interval,
  bootstrap_interval,
  difference,
  normal_interval,
  paired_bootstrap_interval,
)
from ultr_jax.evaluation.policies import (
  Propensities,
  dcg_weights,
  num_prefixes,
  plackett_luce_propensities,
  target_ranks,
)
from ultr_jax.evaluation.registry import ESTIMATORS, Estimator, EstimatorSpec, available_estimators, get_estimator
from ultr_jax.evaluation.truth import Truth, true_value
from ultr_jax.evaluation.validation import check_log, check_support, evaluate, target_scores_from_ranking

__all__ = [
  "ESTIMATORS",
  "Estimate",
  "Estimator",
  "EstimatorSpec",
  "Interval",
  "Propensities",
  "Truth",
  "available_estimators",
  "bootstrap_interval",
  "cascade_doubly_robust",
  "cascade_dr_tables",
  "check_log",
  "check_support",
  "click_dcg",
  "dcg_weights",
  "difference",
  "direct_method",
  "doubly_robust",
  "evaluate",
  "get_estimator",
  "independent_ips",
  "model_click_probabilities",
  "model_examination",
  "normal_interval",
  "num_prefixes",
  "paired_bootstrap_interval",
  "plackett_luce_propensities",
  "pseudo_inverse",
  "reward_interaction_ips",
  "standard_ips",
  "target_propensities",
  "target_ranks",
  "true_value",
]
