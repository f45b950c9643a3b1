"""The configs of the study of the ULTR methods since 2023 (``ultr_jax.studies.since2023``).

Variants: ``default`` (the run the docs page reports), ``smoke`` (one experiment at toy sizes: the default test
run's) and ``smoke_all`` (every experiment at the smoke sizes, a slow test).
The binary is ``experiments/since2023/main.py``.
"""

import ml_collections

from ultr_jax.studies import experiment
from ultr_jax._schema import Rule, integer, number, one_of, sequence, unknown_variant
from ultr_jax.studies.configs._shared import data_rules, seed_rules, train_rules
from ultr_jax.train import default_train_config

__all__ = ["CLAIMS", "CONFIG_RULES", "VARIANTS", "default_config"]

VARIANTS = ("default", "smoke", "smoke_all")
#: The experiments, one per paper's claim (see the study module).
CLAIMS = ("dr_vs_ips", "safety", "disentangle", "upe_vs_dla", "identifiability", "loss_grid")


def default_config(variant: str = "default") -> ml_collections.ConfigDict:
  """The study's config ``variant`` (one of :data:`VARIANTS`).

  Args:
    variant: ``"default"``, ``"smoke"`` or ``"smoke_all"``.

  Returns:
    A fresh ``ml_collections.ConfigDict``.

  >>> default_config().dr_vs_ips.sessions, default_config("smoke").dr_vs_ips.sessions
  ((1000, 10000, 100000), (200,))
  >>> default_config("smoke").claims, len(default_config("smoke_all").claims)
  (('dr_vs_ips',), 6)
  """
  if variant not in VARIANTS:
    raise unknown_variant("since2023", variant, VARIANTS)
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.num_seeds = 3
  c.claims = CLAIMS
  c.data = experiment.default_data_config()
  c.data.num_train, c.data.num_valid, c.data.num_test = 500, 100, 200
  c.top_k = 10  # the displayed list
  # The relevance tower every method uses (the misspecification experiment sets "linear" itself).
  c.ranker = ml_collections.ConfigDict({"ranker": "mlp", "hidden_sizes": (32,)})
  c.train = default_train_config()
  c.train.steps = 600
  c.train.batch_size = 64
  c.train.learning_rate = 3e-3
  c.train.eval_every = 200
  c.train.progress = False
  # 1. DR vs IPS (Oosterhuis TOIS'23): fixed logs of N sessions under trust bias.
  c.dr_vs_ips = ml_collections.ConfigDict({"sessions": (1000, 10000, 100000)})
  # 2. Safety (Gupta et al. SIGIR'23 / CIKM'24): small logs, true and adversarial (inverted relevance) clicks.
  # The logger sorts by 0.5 y + 0.5 U(0, 4): decent but imperfect, so "never worse than the logger" can fail.
  c.safety = ml_collections.ConfigDict({"sessions": (100, 1000), "epsilon": 0.2, "delta": 0.95, "logger_weight": 0.5})
  # 3-5. Logger quality w: the logged ranking sorts w y + (1 - w) U(0, 4) (the KDD'23 reproduction's setup).
  # (The reproduction's grid is w in {0, 0.2, 0.6, 0.8, 1}; three of them keep the default run short.)
  c.disentangle = ml_collections.ConfigDict({"weights": (0.0, 0.6, 1.0), "dropout": 0.1})
  c.upe_vs_dla = ml_collections.ConfigDict({"weights": (0.2, 1.0)})
  c.identifiability = ml_collections.ConfigDict({"weights": (0.2, 1.0), "num_bins": 8})
  # 6. The loss-by-correction grid (Hager et al. SIGIR'24) on a fixed log; clicks held out for the likelihood.
  c.loss_grid = ml_collections.ConfigDict({"sessions": 20000, "held_out": 2000})
  if variant in ("smoke", "smoke_all"):
    c.num_seeds = 2
    c.data.num_train, c.data.num_valid, c.data.num_test = 48, 16, 16
    c.data.list_size, c.data.num_features = 8, 6
    c.top_k = 6
    c.ranker.hidden_sizes = (8,)
    c.train.steps, c.train.batch_size, c.train.eval_every = 12, 8, 6
    c.train.steps_per_call = 6
    c.dr_vs_ips.sessions = (200, 2000)
    c.safety.sessions = (100,)
    c.disentangle.weights = (0.0, 1.0)
    c.upe_vs_dla.weights = (1.0,)
    c.identifiability.weights = (1.0,)
    c.loss_grid.sessions, c.loss_grid.held_out = 400, 100
  if variant == "smoke":  # one experiment, one log: three fits (the default test run's budget)
    c.claims = ("dr_vs_ips",)
    c.dr_vs_ips.sessions = (200,)
  return c


#: The allowed values of the fields the study reads (:func:`~ultr_jax.studies.validate_config`).
CONFIG_RULES: dict[str, Rule] = {
  **seed_rules(),
  **data_rules(sources=("synthetic", "svmlight", "ultra")),
  **train_rules(),
  "claims": sequence(one_of(*CLAIMS), min_len=1),
  "top_k": integer(2),
  "ranker.ranker": one_of("linear", "mlp"),
  "ranker.hidden_sizes": sequence(integer(1)),
  "dr_vs_ips.sessions": sequence(integer(10), min_len=1),
  "safety.sessions": sequence(integer(10), min_len=1),
  "safety.epsilon": number(0, lo_open=True),
  "safety.delta": number(0, 1, lo_open=True, hi_open=True),
  "safety.logger_weight": number(0, 1),
  "disentangle.weights": sequence(number(0, 1), min_len=1),
  "disentangle.dropout": number(0, 1, hi_open=True),
  "upe_vs_dla.weights": sequence(number(0, 1), min_len=1),
  "identifiability.weights": sequence(number(0, 1), min_len=1),
  "identifiability.num_bins": integer(1),
  "loss_grid.sessions": integer(10),
  "loss_grid.held_out": integer(1),
}
