"""The report's configs: every method under every simulated bias, with the identifiability check beside it.

Variants: ``default``, ``full`` (with SIF's channel ablations and the methods since 2023) and ``smoke`` (seconds). The binary is
``experiments/report/main.py``; its config file documents the commands.
"""

import ml_collections

from ultr_jax.studies import experiment
from ultr_jax._schema import Rule, integer, number, one_of, sequence, unknown_variant
from ultr_jax.studies.configs._shared import data_rules, logging_policy_rules, seed_rules, train_rules
from ultr_jax.studies.configs.online import default_online_config, learner_rules
from ultr_jax.train import ONLINE_LEARNERS, available_methods, default_train_config, method_defaults

__all__ = [
  "CONFIG_RULES",
  "ALL_METHODS",
  "BIASES",
  "CLICK_MODEL_LEARNERS",
  "METHODS",
  "SIF_ABLATIONS",
  "SIF_VARIANTS",
  "SINCE_2023",
  "VARIANTS",
  "default_config",
]

VARIANTS = ("default", "full", "smoke")

# SIF-ref's main variants and the two oracle-propensity baselines of its T6 toy; the channel ablations
# (SIF_ABLATIONS) join them in the ":full" variant (21 more trained cells).
SIF_VARIANTS = ("sif_full", "sif_dr", "dr", "sif_position", "ips_trust_oracle", "ips_dpenalty")
SIF_ABLATIONS = ("sif_lambda0", "sif_exp", "sif_dec")
# The click-model learners: a relevance tower as the attraction of a UBM / DBN fitted by session likelihood.
CLICK_MODEL_LEARNERS = ("click_model_ubm", "click_model_dbn")
METHODS = (
  "naive",
  "ips",
  "snips",
  "affine",
  "ips_policy_aware",
  "dla",
  "regression_em",
  "two_tower",
  "paird",
  "vectorization",
  "lbd",
  "cld",
  "cld_pair",
  *SIF_VARIANTS,
  *CLICK_MODEL_LEARNERS,
  "full_info",
)
# The methods since 2023 (``experiments/since2023`` runs their papers' claims) join the ":full" variant too.
SINCE_2023 = ("dr_ltr", "safe_dr", "prpo", "two_tower_disentangled", "two_tower_weighted", "upe")
ALL_METHODS = METHODS[:-1] + SIF_ABLATIONS + SINCE_2023 + METHODS[-1:]
# New columns go last: a bias's index seeds its data (context_pbm's contexts), so appending keeps every
# other column.
BIASES = (
  "pbm",
  "trust",
  "position_trust",
  "dcm",
  "individual",
  "topk",
  "context_pbm",
  "ubm",
  "dbn",
  "ccm",
  "topk_sample",
)


def _biases(top_k: int) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.pbm = {"click_model": {"name": "pbm_table", "eta": 1.0, "eps": 0.1}}
  c.trust = {"click_model": {"name": "trust", "eta": 1.0, "eps": 0.1}}
  c.position_trust = {
    "click_model": {"name": "position_trust", "alpha": 0.6, "delta": 0.3, "gamma": 1.0, "eta": 1.0, "eps": 0.1}
  }
  c.dcm = {"click_model": {"name": "dcm", "continuation": 0.5, "eps": 0.1}}
  # Individual-level observation (LBD): crux features picked by ridge importance, w = w_scale * LBD's w.
  c.individual = {"click_model": {"name": "individual", "eta": 1.0, "eps": 0.1}, "num_crux": 5, "w_scale": 0.3}
  c.topk = {"click_model": {"name": "pbm_table", "eta": 1.0, "eps": 0.1, "top_k": top_k}, "selection": "topk"}
  c.context_pbm = {"click_model": {"name": "context_pbm", "eta": 1.0, "eps": 0.1, "num_contexts": 5}}
  # User browsing model: examination by rank and distance to the last click (the PBM table before one).
  c.ubm = {"click_model": {"name": "ubm", "eta": 1.0, "eps": 0.1}}
  # Click chains: DBN (perseverance 0.9, satisfaction = attraction) and CCM (alpha 0.9, 0.8, 0.2).
  c.dbn = {"click_model": {"name": "dbn", "perseverance": 0.9, "eps": 0.1}}
  c.ccm = {"click_model": {"name": "ccm", "alpha": (0.9, 0.8, 0.2), "eps": 0.1}}
  # Top-k selection under a stochastic logging policy: each session shows a Plackett-Luce sample of the
  # standardised logging scores (temperature 1), cut to the top k, so every candidate is shown now and then
  # (policy-aware IPS, Oosterhuis & de Rijke SIGIR'20, weighs clicks by each candidate's expected examination).
  c.topk_sample = {
    "click_model": {"name": "pbm_table", "eta": 1.0, "eps": 0.1, "top_k": top_k},
    "selection": "topk",
    "logging_temperature": 1.0,
  }
  # Every user can face top-k selection: --config.bias_configs.<bias>.selection=topk lists every candidate
  # (in the logging policy's order) and shows the top k of the logging policy (`topk` is pbm so).
  for name in c.keys():
    if "selection" not in c[name]:
      c[name].selection = "display"
  return c


def default_config(variant: str = "default") -> ml_collections.ConfigDict:
  """The report's config ``variant`` (one of :data:`VARIANTS`).

  Args:
    variant: ``"default"``, ``"full"`` or ``"smoke"``.

  Returns:
    A fresh ``ml_collections.ConfigDict``.

  >>> len(default_config().methods), len(default_config("full").methods), default_config("smoke").biases
  (22, 31, ('pbm', 'topk'))
  """
  if variant not in VARIANTS:
    raise unknown_variant("report", variant, VARIANTS)
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.num_seeds = 3

  config.data = experiment.default_data_config()

  config.logging_policy = experiment.default_logging_policy_config()

  config.biases = BIASES
  config.bias_configs = _biases(config.logging_policy.top_k)

  config.methods = ALL_METHODS if variant == "full" else METHODS
  config.method_configs = ml_collections.ConfigDict()
  mlp = {"ranker": "mlp", "hidden_sizes": (64, 32)}
  for name in ALL_METHODS:
    config.method_configs[name] = ml_collections.ConfigDict(dict(mlp))
  config.method_configs.cld = ml_collections.ConfigDict({"ranker": "linear"})  # CLD's linear ranker (Eq. 9)
  # ULTRA freezes Vectorization's observation vectors and density model for its first 500 of 10k steps;
  # the same 5% of this grid's 600 steps is 30.
  config.method_configs.vectorization.pretrain_steps = 30
  # The DBN learner ranks by its attraction; "product" ranks by attraction x satisfaction (Chapelle &
  # Zhang's relevance), which falls below random outside the click-chain columns.
  config.method_configs.click_model_dbn.dbn_score = "attraction"
  # The click losses' form (the default, listwise softmax, spelled out so it can be set from the command
  # line): --config.method_configs.naive.loss_type=pointwise (sigmoid) or =pairwise.
  for name in ("naive", "ips", "snips", "affine", "ips_policy_aware"):
    config.method_configs[name].loss_type = "listwise"
  # Batched PDGD: PDGD's update on mini-batches of lists shown as Plackett-Luce samples of the ranker's scores.
  # Its weights assume that display, so it is no default column: --config.methods="('pdgd',)"
  # --config.train.display=model_sample (README).
  # Its switches take PDGD apart: pairs="all", debias=False, surrogate="log_probability".
  config.method_configs.pdgd = ml_collections.ConfigDict(
    {**mlp, "top_k": config.logging_policy.top_k, "pairs": "considered", "debias": True, "surrogate": "probability"}
  )
  # Every method's full section (its declared fields and defaults under the values above), so that any
  # documented field is a flag and a misspelt one is refused.
  for name in list(config.method_configs.keys()):
    config.method_configs[name] = method_defaults(name, config.method_configs[name])

  config.train = default_train_config()
  config.train.steps = 600
  config.train.batch_size = 64
  config.train.learning_rate = 3e-3
  config.train.eval_every = 200
  config.train.progress = False
  # A cell whose training diverges is marked (the table's "diverged", a non-zero exit) rather than stopping
  # the whole grid.
  config.train.on_divergence = "mark"
  # Keep each seed's best state on the validation nDCG@10 (False: the final state; saves compiles).
  config.select_on_valid = True

  # Held-out click prediction: fresh sessions of the test queries (each list shown this many times, as
  # in training) score the methods that predict clicks (regression_em, two_tower, the click-model
  # learners) by click perplexity, beside the true click model's own; written to clicks.md. 0: off.
  config.click_eval = ml_collections.ConfigDict({"sessions_per_list": 10})

  # Online learners as more columns, under each bias's users (none by default; e.g.
  # --config.online.methods="('pdgd','nsgd','mgd','dbgd')"): the online study's learners and settings.
  # --config.online.pdgd.display=logged shows PDGD the logging policy's lists instead of its own (README).
  online = default_online_config()
  config.online = ml_collections.ConfigDict(
    {
      k: online[k]
      for k in ("ranker", "hidden_sizes", "zero_init", "num_impressions", "eval_every", "pdgd", "dbgd", "mgd", "nsgd")
    }
  )
  config.online.methods = ()

  if variant == "smoke":
    # Compiles dominate (one train step per method x bias), so the smoke grid is small but has
    # trained cells, both "n/a" reasons and the identifiability column; tests check the whole default
    # grid's cells with ultr_jax.studies.report.plan_cells, which only traces.
    config.methods = ("two_tower", "cld", "ips_trust_oracle")
    config.biases = ("pbm", "topk")
    config.select_on_valid = False
    config.num_seeds = 2
    config.data.num_train = 48
    config.data.num_valid = 12
    config.data.num_test = 12
    config.data.list_size = 8
    config.data.num_features = 6
    config.logging_policy.fraction = 0.1
    config.logging_policy.steps = 10
    config.logging_policy.top_k = 5
    config.bias_configs = _biases(config.logging_policy.top_k)
    for name in ALL_METHODS:
      if name != "cld":
        config.method_configs[name].hidden_sizes = (8,)
    config.click_eval.sessions_per_list = 2
    config.train.steps = 4
    config.train.batch_size = 8
    config.train.eval_every = 4
    config.online.num_impressions, config.online.eval_every = 100, 50
    config.online.mgd.num_candidates = 3
    config.online.nsgd.num_candidates, config.online.nsgd.history, config.online.nsgd.worst = 3, 12, 4
  return config


#: The allowed values of the fields the study reads (:func:`~ultr_jax.studies.validate_config`).
CONFIG_RULES: dict[str, Rule] = {
  **seed_rules(),
  **data_rules(),
  **logging_policy_rules(),
  "biases": sequence(one_of(*BIASES), min_len=1),
  "bias_configs.*.selection": one_of("display", "topk"),
  "bias_configs.*.click_model.eps": number(0, 1),
  "bias_configs.*.logging_temperature": number(0, lo_open=True),
  "bias_configs.*.num_crux": integer(1),
  "bias_configs.*.w_scale": number(0),
  "methods": sequence(one_of(*available_methods())),
  "method_configs.*.hidden_sizes": sequence(integer(1)),
  **train_rules(),
  "click_eval.sessions_per_list": integer(0),
  **learner_rules("online."),
  "online.methods": sequence(one_of(*ONLINE_LEARNERS)),
}
