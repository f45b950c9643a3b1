"""Strict configs: a user's settings merged over declared defaults, an unknown key an error that names it.

Every config the training layer reads (:func:`~ultr_jax.train.fit`'s, each method's) declares its
fields with their defaults in one place; :func:`merge_config` lays the user's values over them and
refuses a key nobody declared, so a misspelt ``max_weigth`` stops the run instead of training
without clipping.
"""

import difflib
from typing import Any, Mapping, Optional, Union

import ml_collections

__all__ = ["merge_config", "pick"]


def _items(config: Any) -> list[tuple[str, Any]]:
  if config is None:
    return []
  if isinstance(config, ml_collections.ConfigDict):
    return list(config.items())
  if isinstance(config, Mapping):
    return list(config.items())
  raise TypeError(f"a config must be a mapping or ml_collections.ConfigDict, got {type(config).__name__}")


def merge_config(
  defaults: Union[Mapping[str, Any], ml_collections.ConfigDict],
  config: Optional[Any] = None,
  *,
  what: str = "config",
  none_is_default: bool = False,
) -> ml_collections.ConfigDict:
  """``defaults`` with ``config``'s values laid over them; a key ``defaults`` lacks raises ``ValueError``.

  Args:
    defaults: every known field and its default value.
    config: the user's values (a mapping or ``ConfigDict``; None or empty: the defaults).
    what: how the error names this config (e.g. ``"method 'ips' config"``).
    none_is_default: a user value of None keeps the default (the methods' convention: None
      stands for "the default", e.g. ``num_positions=None`` for the list size).

  Returns:
    A new, unlocked ``ConfigDict`` holding every declared field (the user's value or the default).

  Raises:
    ValueError: naming each unknown key (with the nearest known one when there is one) and listing
      the known keys.

  >>> c = merge_config({"max_weight": 0.0, "ranker": "mlp"}, {"ranker": "linear"})
  >>> c.ranker, c.max_weight
  ('linear', 0.0)
  >>> merge_config({"max_weight": 0.0, "ranker": "mlp"}, {"max_weigth": 10}, what="method 'ips' config")
  Traceback (most recent call last):
  ...
  ValueError: method 'ips' config: unknown key 'max_weigth' (did you mean 'max_weight'?); known keys: max_weight, ranker
  """
  items = _items(config)
  unknown = [k for k, _ in items if k not in defaults]
  if unknown:
    known = sorted(defaults)
    parts = []
    for k in unknown:
      close = difflib.get_close_matches(str(k), known, n=1)
      parts.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    noun = "key" if len(unknown) == 1 else "keys"
    raise ValueError(f"{what}: unknown {noun} {', '.join(parts)}; known keys: {', '.join(known)}")
  merged = dict(defaults)
  for k, v in items:
    if v is None and none_is_default:
      continue
    merged[k] = v.to_dict() if isinstance(v, ml_collections.ConfigDict) else v
  return ml_collections.ConfigDict(merged)


def pick(defaults: Mapping[str, Any], config: Optional[Any] = None) -> ml_collections.ConfigDict:
  """The fields of ``defaults`` read from ``config`` (a missing or None value: the default); other keys are left.

  For a helper that reads its part of a larger, already checked config (e.g. the relevance tower's
  fields of a method's config); the method's own config goes through :func:`merge_config`.

  >>> c = pick({"ranker": "mlp", "dropout": 0.0}, {"ranker": "linear", "gamma": 0.1, "dropout": None})
  >>> c.ranker, c.dropout, "gamma" in c
  ('linear', 0.0, False)
  """
  merged = dict(defaults)
  for k, v in _items(config):
    if k in defaults and v is not None:
      merged[k] = v.to_dict() if isinstance(v, ml_collections.ConfigDict) else v
  return ml_collections.ConfigDict(merged)
