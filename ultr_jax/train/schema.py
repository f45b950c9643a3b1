"""The allowed values of :func:`~ultr_jax.train.fit`'s config: one declaration for ``fit`` and every study.

``fit`` checks them (:func:`validate_train_config`) before it reads any data, and the studies' training
sections reuse :data:`TRAIN_CONFIG_RULES` (``studies/configs/_shared.py``), so a binary and the Python API
refuse the same values with the same error: the field, its value and the allowed range.

>>> from ultr_jax.train import default_train_config
>>> c = default_train_config()
>>> c.steps = -5
>>> validate_train_config(c)
Traceback (most recent call last):
ValueError: config.steps: -5 is out of range; expected an integer >= 1
"""

from typing import Any

from ultr_jax._schema import Rule, boolean, integer, number, one_of, validate_config
from ultr_jax._checkpoint import ON_CORRUPT
from ultr_jax.train.defaults import DISPLAYS, ON_DIVERGENCE

__all__ = ["TRAIN_CONFIG_RULES", "validate_train_config"]

_METRIC = Rule(
  lambda v: isinstance(v, str) and bool(v), "a metric name such as 'ndcg@10'", ""
)  # which names exist is known only after the first evaluation (checked there)

#: Field of :func:`~ultr_jax.train.default_train_config` -> its :class:`~ultr_jax._schema.Rule`.
TRAIN_CONFIG_RULES: dict[str, Rule] = {
  "steps": integer(1),
  "batch_size": integer(1),
  "optimizer": one_of("adam", "adagrad", "sgd", "adamw"),
  "learning_rate": number(0),  # 0 freezes the parameters (a baseline); a negative rate would ascend the loss
  "grad_clip": number(0),
  "eval_every": integer(0),  # 0: at every step
  "patience": integer(0),
  "select_metric": _METRIC,
  "checkpoint_every": integer(0),
  "max_to_keep": integer(1),
  "eval_batch_size": integer(1),
  "num_devices": integer(0),
  "data_seed": integer(0),
  "data_shards": integer(0),
  "local_data": boolean(),
  "prefetch": integer(0),
  "progress": boolean(),
  "progress_every": integer(0),
  "steps_per_call": integer(1),
  "display": one_of(*DISPLAYS),
  "restart": boolean(),
  "on_divergence": one_of(*ON_DIVERGENCE),
  "on_corrupt_checkpoint": one_of(*ON_CORRUPT),
}


def validate_train_config(config: Any, *, prefix: str = "config") -> None:
  """Checks every field of a training config against :data:`~ultr_jax.train.TRAIN_CONFIG_RULES`; the first one out of
  range raises.

  Args:
    config: a training config (:func:`~ultr_jax.train.default_train_config` with fields changed; a field it
      lacks is not checked).
    prefix: the config's name in the error (a study's section: ``"config.train"``).

  Raises:
    ValueError: ``"<prefix>.<field>: <value> is out of range; expected <allowed>"``.

  >>> validate_train_config({"batch_size": 0, "learning_rate": 0.1})
  Traceback (most recent call last):
  ValueError: config.batch_size: 0 is out of range; expected an integer >= 1
  >>> validate_train_config({"learning_rate": -0.1})
  Traceback (most recent call last):
  ValueError: config.learning_rate: -0.1 is out of range; expected a number >= 0
  """
  validate_config(config, TRAIN_CONFIG_RULES, prefix=prefix)
