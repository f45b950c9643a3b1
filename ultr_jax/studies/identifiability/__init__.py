"""The fully synthetic study of "Identifiability Matters" (Chen et al., ICML 2024): Table 1, Figures 3a-6.

* :mod:`~ultr_jax.studies.identifiability.study`: the driver (:func:`run`), figures and tables;
* :mod:`~ultr_jax.studies.identifiability.table1`: Table 1's rows (each method raw, + node intervention,
  + node merging) on one dataset;
* :mod:`~ultr_jax.studies.identifiability.context`: the context-dependent PBM study (section 5.2);
* :mod:`~ultr_jax.studies.identifiability.embedding`: the embedding fits (DLA, Regression-EM, Two-Tower,
  no debiasing) that Table 1 scores;
* :mod:`~ultr_jax.studies.identifiability.click_log`: the check of a real click log and its harvested
  propensities, streamed (``experiments/identifiability/check.py --click_log``).
"""

from ultr_jax.studies.identifiability import click_log, context, embedding, table1  # noqa: F401  (modules)
from ultr_jax.studies.identifiability.click_log import check_click_log, click_log_counts, propensity_table
from ultr_jax.studies.identifiability.embedding import fit_dla, fit_no_debias, fit_regression_em, fit_two_tower
from ultr_jax.studies.identifiability.study import (
  CONFIG_RULES,
  VARIANTS,
  default_config,
  identifiability_context_study,
  identifiability_figures,
  run,
  run_identifiability_study,
)

__all__ = [
  "CONFIG_RULES",
  "VARIANTS",
  "default_config",
  "check_click_log",
  "click_log_counts",
  "propensity_table",
  "fit_dla",
  "fit_no_debias",
  "fit_regression_em",
  "fit_two_tower",
  "identifiability_context_study",
  "identifiability_figures",
  "run",
  "run_identifiability_study",
]
