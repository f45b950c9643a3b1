"""The click-model study's configs: click models fitted to simulated (or given) session logs.

Variants: ``default`` (60k sessions from each of six generating models, three seeds) and ``smoke``
(seconds). The binary is ``experiments/click_models/main.py``; its config file documents the commands.
"""

import ml_collections

from ultr_jax import data as data_lib
from ultr_jax._schema import Rule, fractions, integer, number, one_of, unknown_variant
from ultr_jax.studies.configs._shared import seed_rules

__all__ = ["CONFIG_RULES", "VARIANTS", "default_click_model_config", "default_config"]

VARIANTS = ("default", "smoke")


def default_click_model_config() -> ml_collections.ConfigDict:
  """The study's default config (the binary: ``experiments/click_models/main.py``).

  Returns:
    A fresh ``ml_collections.ConfigDict`` (the ``"default"`` variant of :func:`default_config`).

  >>> default_click_model_config().num_sessions
  60000
  """
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.num_seeds = 3
  c.num_queries = 100
  c.list_size = 10
  c.label_fractions = (0.45, 0.30, 0.15, 0.07, 0.03)  # grades 0..4 (the synthetic default's)
  c.num_sessions = 60000
  c.test_fraction = 0.2
  c.noise = 0.3  # the logging ranker's score noise (inf: uniform shuffles)
  c.true_models = ("pbm", "ubm", "dcm", "dbn", "ccm", "trust")
  # The classic seven (any of sim.FITTABLE_CLICK_MODELS may be added, e.g. "sdbn", "mixture").
  c.fit_models = ("pbm", "ubm", "cascade", "dcm", "dbn", "ccm", "trust")
  # Click-through-rate baselines beside the click models (sim.CTR_MODELS: gctr, rctr, dctr, drctr), smoothed
  # toward their parent rate by ctr_prior pseudo-impressions: what counting alone predicts.
  c.ctr_models = ("rctr", "dctr", "drctr")
  c.ctr_prior = 1.0
  # Simulator parameters per generating model (the samplers' keyword arguments); ``<name>_per_document =
  # (lo, hi)`` draws ``<name>`` per document, uniform in [lo, hi) (the DBN's satisfaction: with one shared
  # value the DBN would be a CCM with alpha = (gamma, gamma (1 - sigma), gamma (1 - sigma))).
  c.simulators = ml_collections.ConfigDict(
    {
      "pbm": {},
      "ubm": {},
      "cascade": {},
      "dcm": {"continuation": 0.6},
      "dbn": {"perseverance": 0.9, "satisfaction_per_document": (0.2, 0.8)},
      "ccm": {"alpha": (0.9, 0.7, 0.2)},
      "trust": {},  # ULTRA's table with eps+ = 1 - (k + 2)/100, eps- = 0.65/(k + 1)
    }
  )
  c.l2 = 1.0
  c.max_iters = 500
  c.tol = 1e-5
  # A session log instead of the simulation (streamed): a file, a glob or a directory, in click_log_format, or
  # Parquet session shards of convert_click_log.
  c.click_log = ""
  c.click_log_format = "tsv"  # or "baidu" (part-XXXXX.gz), "yandex", "yandex_personalized"; see read_click_log
  c.click_log_batch_size = 4096  # sessions per batch of the stream
  c.click_log_shard_dir = ""  # keep a text log's conversion to session shards here ("": a temporary directory)
  c.list_size_of_log = 0  # 0: the log's largest position
  # Memory for the statistics (bytes): item counts past it are spilled to disk by document; a model whose
  # statistics are its distinct sessions (they barely repeat) and outgrow it is fitted by Adam over the stream
  # instead, this many passes at this learning rate (CLAX's 0.01).
  c.statistics_memory_budget_bytes = 1 << 30
  c.statistics_spill_dir = ""  # where spilled item counts go ("": a temporary directory; shared by all processes)
  c.minibatch_epochs = 1
  c.minibatch_learning_rate = 0.01
  return c


def default_config(variant: str = "default") -> ml_collections.ConfigDict:
  """The click-model study's config ``variant`` (one of :data:`VARIANTS`).

  Args:
    variant: one of :data:`VARIANTS`: ``"default"`` or ``"smoke"`` (seconds).

  Returns:
    A fresh ``ml_collections.ConfigDict``.

  >>> default_config("smoke").true_models
  ('pbm', 'dcm')
  """
  if variant not in VARIANTS:
    raise unknown_variant("click_models", variant, VARIANTS)
  config = default_click_model_config()
  if variant == "smoke":
    config.num_seeds = 2
    config.num_queries = 6
    config.list_size = 5
    config.num_sessions = 600
    config.true_models = ("pbm", "dcm")
    config.max_iters = 100
  return config


#: The allowed values of the fields the study reads (:func:`~ultr_jax.studies.validate_config`).
CONFIG_RULES: dict[str, Rule] = {
  **seed_rules(),
  "num_queries": integer(1),
  "list_size": integer(1),
  "label_fractions": fractions(),  # all zero: no grade to draw (a NaN probability)
  "num_sessions": integer(1),
  "test_fraction": number(0, 1, lo_open=True, hi_open=True),
  "noise": number(0, finite=False),  # inf: uniform shuffles
  "ctr_prior": number(0),
  "l2": number(0),
  "max_iters": integer(1),
  "tol": number(0, lo_open=True),
  "click_log_format": one_of(*data_lib.CLICK_LOG_FORMATS),
  "click_log_batch_size": integer(1),
  "list_size_of_log": integer(0),
  "statistics_memory_budget_bytes": integer(1),
  "minibatch_epochs": integer(1),
  "minibatch_learning_rate": number(0, lo_open=True),
}
