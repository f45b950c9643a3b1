"""Value rules of the config sections several studies share: data, logging policy, training."""

from ultr_jax import data as data_lib
from ultr_jax._schema import Rule, integer, number, one_of
from ultr_jax.train.schema import TRAIN_CONFIG_RULES

__all__ = ["data_rules", "logging_policy_rules", "seed_rules", "train_rules"]

#: What the ``num_seeds`` and ``seed`` fields of every study take.
SEEDS = {"seed": integer(0), "num_seeds": integer(1)}


def seed_rules() -> dict[str, Rule]:
  """``seed`` (a non-negative integer) and ``num_seeds`` (at least one)."""
  return dict(SEEDS)


def data_rules(prefix: str = "data", sources=("synthetic", "svmlight", "ultra", "baidu")) -> dict[str, Rule]:
  """The fields of :func:`~ultr_jax.studies.experiment.default_data_config` (those a section holds are checked)."""
  rules = {
    "source": one_of(*sources),
    "seed": integer(0),
    "num_train": integer(1),
    "num_valid": integer(1),
    "num_test": integer(1),
    "list_size": integer(1),
    "num_features": integer(0),  # svmlight: 0 reads every feature of the files
    "normalize": one_of("", *data_lib.NORMALIZATIONS),
    "max_sessions": integer(0),
    "feature_dtype": one_of("float16", "float32", "float64"),
    "click_test_fraction": number(0, 1, lo_open=True, hi_open=True),
  }
  return {f"{prefix}.{k}": v for k, v in rules.items()}


def logging_policy_rules(prefix: str = "logging_policy") -> dict[str, Rule]:
  """The production ranker: fit on a ``fraction`` in (0, 1] of the training queries, shows its ``top_k``."""
  rules = {
    "fraction": number(0, 1, lo_open=True),
    "seed": integer(0),
    "steps": integer(1),
    "top_k": integer(1),
  }
  return {f"{prefix}.{k}": v for k, v in rules.items()}


def train_rules(prefix: str = "train") -> dict[str, Rule]:
  """The fields of :func:`~ultr_jax.train.default_train_config` (those a section holds are checked): the one
  declaration, :data:`ultr_jax.train.schema.TRAIN_CONFIG_RULES`, under ``prefix``."""
  return {f"{prefix}.{k}": v for k, v in TRAIN_CONFIG_RULES.items()}
