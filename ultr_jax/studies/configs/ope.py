"""The off-policy evaluation study's configs: every estimator against the exact truth over replicate logs.

Variants: ``default`` (logs of 10^3 to 10^6 sessions, 100 replicates each; hours on 2 CPU cores), ``grid``
(10^3 to 10^5 sessions, three logging temperatures: the run the docs page reports), ``docs`` (10^3 and 10^4
sessions, three logging temperatures) and ``smoke`` (seconds). The binary
is ``experiments/ope/main.py``; its config file documents the commands.
"""

import ml_collections

from ultr_jax import evaluation as ev
from ultr_jax import simulation as sim
from ultr_jax._schema import Rule, fractions, integer, number, one_of, sequence, unknown_variant

__all__ = ["CONFIG_RULES", "VARIANTS", "default_config"]

VARIANTS = ("default", "smoke", "docs", "grid")


def default_config(variant: str = "default") -> ml_collections.ConfigDict:
  """The study's config: ``"default"`` (10^3 to 10^6 sessions, 100 replicates; hours on 2 CPU cores),
  ``"grid"`` (10^3 to 10^5 sessions, temperatures 1, 0.2 and uniform, 100 replicates, the model-based
  estimators on 5: the run the docs page reports), ``"docs"`` (10^3 and 10^4 sessions) or ``"smoke"`` (seconds).

  >>> c = default_config(); c.log_sizes, c.num_replicates, len(c.users)
  ((1000, 10000, 100000, 1000000), 100, 3)
  """
  if variant not in VARIANTS:
    raise unknown_variant("ope", variant, VARIANTS)
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.num_queries = 100
  c.list_size = 5  # every ranking of a query is enumerated (5! = 120): the logging propensities are exact
  c.label_fractions = (0.45, 0.30, 0.15, 0.07, 0.03)  # grades 0..4
  c.logging_noise = 1.0  # the logging ranker's scores: labels + logging_noise * N(0, 1), fixed per query
  c.temperatures = (0.2, 1.0, 5.0, float("inf"))  # Plackett-Luce temperatures of the logging policy; inf: uniform
  c.users = ("pbm", "cascade", "dbn")
  # Click-model parameters per user (the samplers' keyword arguments); "<name>_per_document": (lo, hi) draws
  # <name> per document, uniform in [lo, hi).
  c.user_params = ml_collections.ConfigDict(
    {"pbm": {"eta": 1.0}, "cascade": {}, "dbn": {"perseverance": 0.9, "satisfaction_per_document": (0.2, 0.8)}}
  )
  c.num_targets = 11
  c.target_temperature = 0.0  # 0: deterministic targets
  # The reward per session: "dcg", the clicks discounted by 1 / log2(position + 2), or "clicks", their number.
  # With every item shown, a cascade user's number of clicks, 1 - prod(1 - a), is the same for every ranking:
  # only the discounted reward tells the rankers apart under cascade users.
  c.reward_weights = "dcg"
  c.log_sizes = (1000, 10000, 100000, 1000000)
  c.num_replicates = 100
  c.estimators = ("sips", "snsips", "iips", "sniips", "rips", "snrips", "pi", "snpi")
  c.model_estimators = ("dm", "dr", "cascade_dr")
  c.fitted_models = ("pbm", "dbn")
  c.model_replicates = 20
  c.fit_l2 = 1.0
  c.fit_max_iters = 300
  c.alpha = 0.1  # 90% intervals
  c.replicate_chunk_sessions = 200_000  # sessions of the replicates vmapped at once (memory)
  c.pairs_max_sessions = 100_000  # the pseudo-inverse's pairwise propensities only up to this log size
  c.figure_temperature = 1.0
  if variant in ("docs", "grid"):
    c.log_sizes = (1000, 10000) if variant == "docs" else (1000, 10000, 100000)
    c.temperatures = (1.0, 0.2, float("inf"))
    c.model_replicates = 5
    c.fit_max_iters = 100
  elif variant == "smoke":
    c.num_queries = 8
    c.list_size = 4
    c.temperatures = (1.0, float("inf"))
    c.users = ("pbm", "cascade")
    c.num_targets = 4
    c.log_sizes = (200, 1000)
    c.num_replicates = 8
    c.model_replicates = 2
    c.fitted_models = ("pbm",)
    c.fit_max_iters = 50
  return c


#: Users: the click models whose simulator needs nothing beyond the attraction (no context, no features).
USERS = tuple(n for n in sim.click_models() if not sim.get_click_model(n).batch_inputs)
#: The estimators that read the log and the logging propensities alone, and those that need a fitted click model.
MODEL_FREE = tuple(n for n, s in ev.ESTIMATORS.items() if set(s.inputs) == {"logging"})
MODEL_BASED = tuple(n for n, s in ev.ESTIMATORS.items() if "model" in s.inputs)
_TEMPERATURE = number(0, lo_open=True, finite=False)  # inf: the uniform policy

#: The allowed values of every field (checked before any work; the checks across fields are the study's).
CONFIG_RULES: dict[str, Rule] = {
  "seed": integer(0),
  "num_queries": integer(1),
  "list_size": integer(2, 7),  # every ranking is enumerated: at most 7! = 5040 per query
  "label_fractions": fractions(),  # all zero: no grade to draw (a NaN probability)
  "logging_noise": number(0),
  "temperatures": sequence(_TEMPERATURE, min_len=1),
  "users": sequence(one_of(*USERS), min_len=1),
  "num_targets": integer(2),
  "target_temperature": number(0),
  "reward_weights": one_of("clicks", "dcg"),
  "log_sizes": sequence(integer(2), min_len=1),
  "num_replicates": integer(2),
  "estimators": sequence(one_of(*MODEL_FREE), min_len=1),  # the model-free estimators: the study's subject
  "model_estimators": sequence(one_of(*MODEL_BASED)),
  "fitted_models": sequence(one_of(*sim.FITTABLE_CLICK_MODELS)),
  "model_replicates": integer(0),
  "fit_l2": number(0),
  "fit_max_iters": integer(1),
  "alpha": number(0, 1, lo_open=True, hi_open=True),
  "replicate_chunk_sessions": integer(1),
  "pairs_max_sessions": integer(0),
  "figure_temperature": _TEMPERATURE,
}
