"""The online study's configs: PDGD, DBGD, MGD and NSGD under the cascade users of the online LTR literature.

Variants: ``default`` (the PDGD paper's protocol) and ``smoke`` (seconds). The binary is
``experiments/online/main.py``; its config file documents the commands.
"""

import ml_collections

from ultr_jax._schema import Rule, integer, number, one_of, sequence, unknown_variant
from ultr_jax.studies.configs._shared import data_rules, seed_rules
from ultr_jax.train import DISPLAYS, MULTILEAVE_METHODS
from ultr_jax.studies.experiment import default_data_config
from ultr_jax.train.online import ONLINE_CLICK_MODELS, ONLINE_LEARNERS, online_learner_config

__all__ = ["CONFIG_RULES", "learner_rules", "VARIANTS", "default_config", "default_online_config"]

VARIANTS = ("default", "smoke")


def default_online_config() -> ml_collections.ConfigDict:
  """The online study's default: the PDGD paper's protocol on the baselines' synthetic data.

  Oosterhuis & de Rijke (CIKM'18): 1000 training queries of 20 candidates, the top 10 shown, 10,000
  impressions, linear rankers from :math:`w = 0`, five seeds; every learner of
  :data:`~ultr_jax.train.ONLINE_LEARNERS` with its registered defaults
  (:func:`~ultr_jax.train.online_learner_config`) under the perfect, navigational and informational
  cascade users, and the full-information ceiling.

  Returns:
    A fresh ``ml_collections.ConfigDict`` (the ``"default"`` variant of :func:`default_config`).

  >>> default_online_config().num_impressions
  10000
  """
  learners = online_learner_config()
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.num_seeds = 5
  # The baselines' data: synthetic 1000/200/200 queries of 20 candidates, or ``source="svmlight"`` /
  # ``"ultra"`` files; the users issue the training queries, the test queries score the learner offline
  # (the validation split is not used).
  c.data = default_data_config()
  c.top_k = learners.top_k
  c.click_models = tuple(ONLINE_CLICK_MODELS)
  # More users for ``click_models``, by name: make_click_fn configs, cut to the top_k shown (the report's
  # position and trust bias and DCM columns), e.g. --config.click_models="('informational','pbm')".
  c.click_model_configs = ml_collections.ConfigDict(
    {
      "pbm": {"name": "pbm_table", "eta": 1.0, "eps": 0.1},
      "trust": {"name": "trust", "eta": 1.0, "eps": 0.1},
      "dcm": {"name": "dcm", "continuation": 0.5, "eps": 0.1},
    }
  )
  c.methods = tuple(ONLINE_LEARNERS)
  for key in ("ranker", "hidden_sizes", "zero_init"):
    c[key] = learners[key]
  c.num_devices = 0  # seeds are split over this many devices (0: all), reduced to a divisor of num_seeds
  c.num_impressions = learners.num_impressions
  c.eval_every = learners.eval_every
  for name in ONLINE_LEARNERS:  # each learner's section (its registered defaults)
    c[name] = learners[name]
  # The ceiling: the same ranker trained offline on the true labels (listwise softmax, Adam, full batch).
  c.full_info = ml_collections.ConfigDict({"enabled": True, "steps": 1000, "learning_rate": 0.01})
  return c


def default_config(variant: str = "default") -> ml_collections.ConfigDict:
  """The online study's config ``variant`` (one of :data:`VARIANTS`).

  Args:
    variant: one of :data:`VARIANTS`: ``"default"`` or ``"smoke"`` (seconds).

  Returns:
    A fresh ``ml_collections.ConfigDict``.

  >>> default_config("smoke").num_impressions
  300
  """
  if variant not in VARIANTS:
    raise unknown_variant("online", variant, VARIANTS)
  config = default_online_config()
  if variant == "smoke":
    config.num_seeds = 2
    config.data.num_train = 50
    config.data.num_valid = 1
    config.data.num_test = 20
    config.data.list_size = 8
    config.data.num_features = 6
    config.top_k = 5
    config.click_models = ("perfect", "informational")
    config.num_impressions = 300
    config.eval_every = 100
    config.mgd.num_candidates = 3
    config.nsgd.num_candidates, config.nsgd.history, config.nsgd.worst = 3, 12, 4  # 7 parameters here
    config.full_info.steps = 100
  return config


def learner_rules(prefix: str = "") -> dict[str, Rule]:
  """The allowed values of the online learners' fields (the online study's and the report's ``online`` section).

  >>> learner_rules("online.")["online.nsgd.worst"].allowed
  'an integer >= 0'
  """
  dueling = {"learning_rate": number(0, lo_open=True), "unit": number(0, lo_open=True), "tau": number(0, lo_open=True)}
  dueling["multileave"] = one_of(*MULTILEAVE_METHODS)
  rules = {
    "ranker": one_of("linear", "mlp"),
    "hidden_sizes": sequence(integer(1)),
    "num_impressions": integer(1),
    "eval_every": integer(1),
    "pdgd.learning_rate": number(0, lo_open=True),
    "pdgd.display": one_of(*DISPLAYS),
    **{f"{name}.{k}": rule for name in ("dbgd", "mgd", "nsgd") for k, rule in dueling.items()},
    "mgd.num_candidates": integer(1),
    "nsgd.num_candidates": integer(1),
    "nsgd.history": integer(1),
    "nsgd.worst": integer(0),
    "nsgd.tie_queries": integer(0),
    "nsgd.tie_window": integer(1),
  }
  return {prefix + k: rule for k, rule in rules.items()}


#: The allowed values of the fields the study reads (:func:`~ultr_jax.studies.validate_config`).
CONFIG_RULES: dict[str, Rule] = {
  **seed_rules(),
  **data_rules(sources=("synthetic", "svmlight", "ultra")),
  "top_k": integer(1),
  "methods": sequence(one_of(*ONLINE_LEARNERS)),
  "num_devices": integer(0),
  **learner_rules(),
  "full_info.steps": integer(1),
  "full_info.learning_rate": number(0, lo_open=True),
}
