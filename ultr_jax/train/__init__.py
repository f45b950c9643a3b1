"""ultr_jax.train: the training loop, sharding, checkpoints and results.

The studies that drive it (the baselines study's ``train_and_evaluate`` among them) are
:mod:`ultr_jax.studies`.

>>> from ultr_jax.train import default_train_config
>>> default_train_config().select_metric
'ndcg@10'
"""

from ultr_jax._checkpoint import Checkpointer
from ultr_jax.train.compilation import enable_compilation_cache
from ultr_jax.train.loop import (
  DEFAULT_CUTOFFS,
  DISPLAYS,
  OnEval,
  default_train_config,
  display_batch,
  evaluate,
  evaluate_clicks,
  fingerprint_diff,
  fit,
  make_optimizer,
  predict,
  run_fingerprint,
  training_arrays,
)
from ultr_jax.train.method import Method
from ultr_jax.train.online import (
  MULTILEAVE_METHODS,
  ONLINE_CLICK_MODELS,
  ONLINE_LEARNERS,
  ONLINE_METHODS,
  OnlineLearner,
  online_click_model,
  online_learner_config,
  online_learning,
  online_users_missing,
  register_online_learner,
)
from ultr_jax.train.config import merge_config
from ultr_jax.train.input import TrainLayout, place_train
from ultr_jax.train.methods import available_methods, get_method, method_defaults, register, shared_method_configs
from ultr_jax.train.results import (
  FitResult,
  atomic_write_text,
  markdown_table,
  run_in_progress,
  summarize,
  write_results,
  write_run,
)
from ultr_jax.train.schema import TRAIN_CONFIG_RULES, validate_train_config
from ultr_jax.train.sharding import make_mesh, maybe_initialize_distributed
from ultr_jax.train.state import TrainState, create_train_state
from ultr_jax.train.step import TrainSteps, make_train_steps

__all__ = [
  "Checkpointer",
  "DEFAULT_CUTOFFS",
  "FitResult",
  "Method",
  "OnEval",
  "TrainLayout",
  "TrainState",
  "TrainSteps",
  "ONLINE_CLICK_MODELS",
  "MULTILEAVE_METHODS",
  "DISPLAYS",
  "display_batch",
  "ONLINE_LEARNERS",
  "ONLINE_METHODS",
  "OnlineLearner",
  "atomic_write_text",
  "available_methods",
  "create_train_state",
  "default_train_config",
  "enable_compilation_cache",
  "evaluate",
  "evaluate_clicks",
  "fingerprint_diff",
  "fit",
  "validate_train_config",
  "TRAIN_CONFIG_RULES",
  "get_method",
  "merge_config",
  "method_defaults",
  "shared_method_configs",
  "make_mesh",
  "make_optimizer",
  "make_train_steps",
  "markdown_table",
  "maybe_initialize_distributed",
  "online_click_model",
  "online_learner_config",
  "online_learning",
  "online_users_missing",
  "place_train",
  "predict",
  "register",
  "register_online_learner",
  "run_fingerprint",
  "training_arrays",
  "run_in_progress",
  "summarize",
  "write_results",
  "write_run",
]
