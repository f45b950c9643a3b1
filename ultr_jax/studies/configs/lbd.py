"""The LBD study's configs (Chen et al., NeurIPS'22: individual-level bias, eta sweep, Table 1 / Figures 3-4).

Variants: ``default`` (4 etas, both rankers) and ``smoke`` (seconds). The binary is
``experiments/lbd/main.py``; its config file documents the commands and the sizing.
"""

import ml_collections

from ultr_jax._schema import Rule, for_fields, integer, number, one_of, sequence, unknown_variant
from ultr_jax.studies.configs._shared import data_rules, logging_policy_rules, seed_rules, train_rules
from ultr_jax.train import default_train_config

__all__ = ["CONFIG_RULES", "BASELINES", "VARIANTS", "default_config"]

VARIANTS = ("default", "smoke")

BASELINES = ("labeled_data", "click_data", "ips", "dla", "regression_em", "paird", "two_tower")


def default_config(variant: str = "default") -> ml_collections.ConfigDict:
  """The LBD study's config ``variant`` (one of :data:`VARIANTS`).

  Args:
    variant: one of :data:`VARIANTS` (``"default"``, ``"smoke"``, ...).

  Returns:
    A fresh ``ml_collections.ConfigDict``.

  >>> default_config().etas, default_config("smoke").etas
  ((0.0, 0.1, 0.3, 0.6), (0.0, 0.1, 0.6))
  """
  if variant not in VARIANTS:
    raise unknown_variant("lbd", variant, VARIANTS)
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.num_seeds = 3

  config.data = ml_collections.ConfigDict()
  config.data.source = "synthetic"  # synthetic (an offline stand-in) | svmlight | ultra
  config.data.seed = 0
  config.data.num_train = 3000
  config.data.num_valid = 500
  config.data.num_test = 500
  config.data.list_size = 20
  config.data.num_features = 50
  config.data.train_path = ""
  config.data.valid_path = ""
  config.data.test_path = ""
  config.data.path = ""
  config.data.normalize = ""
  config.data.crux_indices = ()

  # Production ranker on a small labelled fraction; its top 10 are displayed.
  config.logging_policy = ml_collections.ConfigDict()
  config.logging_policy.fraction = 0.02
  config.logging_policy.seed = 0
  config.logging_policy.steps = 300
  config.logging_policy.top_k = 10

  config.etas = (0.0, 0.1, 0.3, 0.6)  # the paper's 7-point sweep: --config.etas='(0.0,0.1,0.2,0.3,0.4,0.5,0.6)'
  config.table_eta = 0.1
  config.max_redraws = 100
  config.compilation_cache_dir = ""  # persistent XLA cache: relative = under --workdir, absolute = shared
  config.workers = 2  # (ranker, method) cells trained concurrently (threads)
  config.grid_etas_per_job = 2  # the (lambda, t) grid of each ranker is split into jobs of this many etas (0: one)
  config.skip_zero_lambda_gp = True  # lambda = 0 grid members skip the GP (same gradients, faster steps)
  config.rankers = ("linear", "dnn")
  config.dnn_hidden_sizes = (64, 32)
  config.baselines = BASELINES
  # The baselines' rankers: "before" = the LBD code's (a LayerNorm before every dense layer,
  # the input included, so the baseline Linear is LayerNorm then dense); "after" = the foundation's.
  config.baseline_norm = "before"

  # LBD grid (the paper's Appendix C.2), lambda on the authors' (B, T, n) = (256, 10, 10) scale.
  config.lams = (1.0, 100.0, 10000.0)
  config.ts = (0.1, 0.2, 0.3, 0.4)
  config.keep = 0.1
  config.gp_mode = "code"
  config.select_metric = "ndcg@10"

  config.optimizers = ml_collections.ConfigDict()
  config.optimizers.linear = ml_collections.ConfigDict({"optimizer": "sgd", "learning_rate": 0.05, "grad_clip": 5.0})
  config.optimizers.dnn = ml_collections.ConfigDict({"optimizer": "adagrad", "learning_rate": 0.05, "grad_clip": 5.0})

  config.train = default_train_config()
  config.train.steps = 600
  config.train.batch_size = 128
  config.train.eval_every = 600  # no validation during training: final state (valid selects (lambda, t))
  config.train.patience = 0
  config.train.progress = True
  config.train.progress_every = 100  # a line per grid job every 100 steps

  if variant == "smoke":
    config.num_seeds = 2
    config.data.num_train = 64
    config.data.num_valid = 16
    config.data.num_test = 16
    config.data.num_features = 12
    config.etas = (0.0, 0.1, 0.6)
    config.dnn_hidden_sizes = (8,)
    config.lams = (1.0, 10000.0)
    config.ts = (0.1, 0.4)
    config.logging_policy.steps = 20
    config.logging_policy.fraction = 0.1
    config.train.steps = 6
    config.train.batch_size = 16
    config.train.eval_every = 6
    config.train.progress = False
    # Compile-dominated (6 steps): one vmapped group instead of two halves the grid step's compile,
    # and one grid job per ranker compiles once.
    config.skip_zero_lambda_gp = False
    config.grid_etas_per_job = 0
  return config


#: The allowed values of the fields the study reads (:func:`~ultr_jax.studies.validate_config`).
_VARIANT_CONFIGS = [default_config(v) for v in VARIANTS]
CONFIG_RULES: dict[str, Rule] = {
  **seed_rules(),
  **for_fields(data_rules(sources=("synthetic", "svmlight", "ultra")), *_VARIANT_CONFIGS),
  "data.crux_indices": sequence(integer(0)),
  **for_fields(logging_policy_rules(), *_VARIANT_CONFIGS),
  "etas": sequence(number(0), min_len=1),
  "table_eta": number(0),
  "max_redraws": integer(1),
  "workers": integer(1),
  "grid_etas_per_job": integer(0),
  "rankers": sequence(one_of("linear", "dnn"), min_len=1),
  "dnn_hidden_sizes": sequence(integer(1), min_len=1),
  "baselines": sequence(one_of(*BASELINES)),
  "baseline_norm": one_of("before", "after"),
  "lams": sequence(number(0), min_len=1),
  "ts": sequence(number(0, 1), min_len=1),
  "keep": number(0, 1),
  "optimizers.*.optimizer": one_of("adam", "adagrad", "sgd", "adamw"),
  "optimizers.*.learning_rate": number(0, lo_open=True),
  "optimizers.*.grad_clip": number(0),
  **for_fields(train_rules(), *_VARIANT_CONFIGS),
}
