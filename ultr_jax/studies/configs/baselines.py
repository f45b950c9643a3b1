"""The baselines study's configs: every baseline method under one click model (PBM, eta = 1, synthetic data).

Variants: ``default`` and ``smoke`` (seconds). The binary is ``experiments/baselines/main.py``.
"""

import ml_collections

from ultr_jax._schema import Rule, integer, number, one_of, optional, sequence, unknown_variant
from ultr_jax.studies.configs._shared import data_rules, logging_policy_rules, seed_rules, train_rules
from ultr_jax.studies import experiment
from ultr_jax.train import available_methods, default_train_config, method_defaults

__all__ = ["CONFIG_RULES", "METHODS", "VARIANTS", "default_config"]

METHODS = ("naive", "ips", "snips", "dla", "regression_em", "two_tower", "paird", "full_info")
VARIANTS = ("default", "smoke")


def default_config(variant: str = "default") -> ml_collections.ConfigDict:
  """The baselines study's config ``variant`` (one of :data:`VARIANTS`).

  Args:
    variant: one of :data:`VARIANTS`: ``"default"`` or ``"smoke"`` (seconds).

  Returns:
    A fresh ``ml_collections.ConfigDict``.

  >>> default_config().train.steps, default_config("smoke").train.steps
  (3000, 20)
  """
  if variant not in VARIANTS:
    raise unknown_variant("baselines", variant, VARIANTS)
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.num_seeds = 3

  config.data = experiment.default_data_config()

  # ULTRA protocol: a production ranker trained on 1% of labelled training
  # queries; the top 10 of its ranking are displayed.
  config.logging_policy = experiment.default_logging_policy_config()

  config.click_model = ml_collections.ConfigDict()
  config.click_model.name = "pbm_table"  # ULTRA's eye-tracking table ** eta
  # Not set (None): the model's default, 1.0. Only the models with a position table take eta, so
  # --config.click_model.name=dbn switches the model alone; --config.click_model.eta=2.0 sets it for those that do.
  config.click_model.eta = ml_collections.config_dict.placeholder(float)
  config.click_model.eps = 0.1

  # Unnormalised DCG@k columns besides nDCG (none by default): Baidu-ULTR's annotations are compared by
  # DCG@1/3/5/10 (Hager et al. SIGIR 2024), e.g. --config.dcg_cutoffs="(1,3,5,10)".
  config.dcg_cutoffs = ()
  # TREC run files of every method's test rankings (runs/<method>.seed<seed>.txt in the workdir, for trec_eval
  # or ir_measures): --config.write_runs=True.
  config.write_runs = False

  config.methods = METHODS
  # Every method's full section (its declared fields and defaults), so that any documented field is a flag
  # (--config.method_configs.ips.propensities=...) and a misspelt one is refused.
  config.method_configs = ml_collections.ConfigDict()
  for name in METHODS:
    config.method_configs[name] = method_defaults(name, {"ranker": "mlp", "hidden_sizes": (64, 32)})

  config.train = default_train_config()
  config.train.steps = 3000
  config.train.batch_size = 64
  config.train.learning_rate = 3e-3
  config.train.eval_every = 250
  config.train.patience = 0

  if variant == "smoke":
    config.num_seeds = 2
    config.data.num_train = 64
    config.data.num_valid = 16
    config.data.num_test = 16
    config.data.list_size = 12
    config.data.num_features = 8
    config.logging_policy.steps = 20
    config.logging_policy.top_k = 6
    config.train.steps = 20
    config.train.batch_size = 16
    config.train.eval_every = 10
  return config


#: The allowed values of the fields the study reads (:func:`~ultr_jax.studies.validate_config`).
CONFIG_RULES: dict[str, Rule] = {
  **seed_rules(),
  **data_rules(),
  **logging_policy_rules(),
  "click_model.eta": optional(number(0)),
  "click_model.eps": optional(number(0, 1)),
  "dcg_cutoffs": sequence(integer(1)),
  "methods": sequence(one_of(*available_methods()), min_len=1),
  **train_rules(),
}
