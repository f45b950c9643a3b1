"""The SIF study's configs (its T6/T7 toy: position-only and position+trust; T8 propensity recovery).

Variants: ``default``, ``smoke`` (seconds), ``t7`` (T7 at 20k steps) and ``t8`` (T8 alone). The binary is
``experiments/sif/main.py``; its config file documents the commands.
"""

import ml_collections

from ultr_jax._schema import Rule, for_fields, integer, number, one_of, sequence, unknown_variant
from ultr_jax.studies.configs._shared import train_rules

__all__ = ["CONFIG_RULES", "METHODS", "VARIANTS", "default_config"]

VARIANTS = ("default", "smoke", "t7", "t8")

METHODS = ("naive", "ips", "dla", "regression_em", "paird", "dr", "sif_exp", "sif_dec", "sif_full", "sif_dr")


def default_config(variant: str = "default") -> ml_collections.ConfigDict:
  """The SIF study's config ``variant`` (one of :data:`VARIANTS`).

  >>> default_config().train.steps, default_config("t7").train.steps
  (2000, 20000)
  """
  if variant not in VARIANTS:
    raise unknown_variant("sif", variant, VARIANTS)
  c = ml_collections.ConfigDict()
  c.num_seeds = 3
  c.progress = False
  c.compilation_cache_dir = "jax_cache"  # persistent XLA cache under --workdir ("" off; absolute: shared)

  c.data = ml_collections.ConfigDict()
  c.data.source = "toy"  # toy | svmlight
  c.data.seed = 0
  c.data.num_train = 3000
  c.data.num_valid = 500
  c.data.num_test = 1000
  c.data.logging_corr = 0.7
  c.data.list_size = 10
  c.data.train_path = ""
  c.data.valid_path = ""
  c.data.test_path = ""

  # T6: oracle propensities, population clicks, linear ranker, full-batch GD.
  c.t6 = ml_collections.ConfigDict()
  c.t6.enabled = True
  c.t6.alphas = (0.3, 0.6, 1.0)
  c.t6.lambdas = (1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
  c.t6.steps = 3000
  c.t6.learning_rate = 0.5

  # T7/T8: learned towers, one sampled session per query per step.
  c.methods = METHODS
  c.position_setting = True
  c.alphas = (0.3, 0.6, 1.0)
  c.figure_alpha = 0.6
  c.k_top = 3
  c.ranker = ml_collections.ConfigDict({"ranker": "mlp", "hidden_sizes": (64, 32), "layer_norm": False})
  c.method_configs = ml_collections.ConfigDict()
  c.method_configs.sif_exp = ml_collections.ConfigDict({"lambda_E": 1.0})
  c.method_configs.sif_dec = ml_collections.ConfigDict({"lambda_D": 10.0})
  c.method_configs.sif_full = ml_collections.ConfigDict({"lambda_E": 1.0, "lambda_D": 10.0})
  c.method_configs.sif_dr = ml_collections.ConfigDict({"lambda_E": 1.0, "lambda_D": 10.0})

  # T8: propensity recovery on position-only clicks, 10k steps; its own variant (`:t8`), as it
  # does not fit the default run's time budget. displays: "logging" (the toy as logged, sorted by
  # the logging score) and "random" (lists shuffled: position independent of the features).
  c.t8 = ml_collections.ConfigDict()
  c.t8.enabled = False
  c.t8.methods = ("ips", "dla", "sif_exp", "sif_position")
  c.t8.displays = ("logging", "random")
  c.t8.steps = 10000
  c.t8.eval_every = 1000

  c.train = ml_collections.ConfigDict()
  c.train.steps = 2000
  c.train.batch_size = 256
  c.train.optimizer = "adagrad"
  c.train.learning_rate = 0.05
  c.train.grad_clip = 5.0
  c.train.eval_every = 200

  if variant == "smoke":
    c.num_seeds = 2
    c.data.num_train, c.data.num_valid, c.data.num_test = 200, 50, 100
    c.t6.alphas = (0.6,)
    c.t6.lambdas = (10.0, 300.0)
    c.t6.steps = 50
    c.methods = ("naive", "ips", "dla", "dr", "sif_dec", "sif_full")
    c.alphas = (0.6,)
    c.train.steps = 40
    c.train.batch_size = 32
    c.train.eval_every = 20
  elif variant == "t7":  # T7 at 20k steps; the default run's 2,000 fit its 20-minute budget
    c.t6.enabled = False
    c.position_setting = False
    c.alphas = (0.6,)
    c.methods = ("dla", "sif_exp", "sif_dec")
    c.train.steps = 20000
    c.train.eval_every = 1000
  elif variant == "t8":
    c.t6.enabled = False
    c.position_setting = False
    c.alphas = ()
    c.t8.enabled = True
  return c


#: The allowed values of the fields the study reads (:func:`~ultr_jax.studies.validate_config`).
_VARIANT_CONFIGS = [default_config(v) for v in VARIANTS]
CONFIG_RULES: dict[str, Rule] = {
  "num_seeds": integer(1),
  "data.source": one_of("toy", "svmlight"),
  "data.seed": integer(0),
  "data.num_train": integer(1),
  "data.num_valid": integer(1),
  "data.num_test": integer(1),
  "data.logging_corr": number(-1, 1),
  "data.list_size": integer(1),
  "t6.alphas": sequence(number(0, 1)),
  "t6.lambdas": sequence(number(0)),
  "t6.steps": integer(1),
  "t6.learning_rate": number(0, lo_open=True),
  "alphas": sequence(number(0, 1)),
  "figure_alpha": number(0, 1),
  "k_top": integer(1),
  "ranker.ranker": one_of("linear", "mlp"),
  "ranker.hidden_sizes": sequence(integer(1)),
  "method_configs.*.lambda_E": number(0),
  "method_configs.*.lambda_D": number(0),
  "t8.displays": sequence(one_of("logging", "random")),
  "t8.steps": integer(1),
  "t8.eval_every": integer(1),
  **for_fields(train_rules(), *_VARIANT_CONFIGS),
}
