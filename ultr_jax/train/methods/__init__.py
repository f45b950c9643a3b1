"""Registry of trainable methods: ``get_method(name, config, ...)``.

Each family lives in its own module (``baselines``, ``click_models``, ``lbd``, ``cld``,
``sif``) and registers factories with :func:`register`. A factory has the
signature ``factory(config, *, num_features, list_size) -> Method`` where
``config`` is the method's ``ml_collections.ConfigDict`` (may be empty).
"""

import importlib
from typing import Callable

from ultr_jax.train.method import Method

__all__ = ["register", "get_method", "available_methods"]

_REGISTRY: dict[str, Callable[..., Method]] = {}
_FAMILIES = ("baselines", "click_models", "lbd", "cld", "sif")


def register(name: str):
  """Decorator registering a method factory under ``name``."""

  def wrap(factory):
    if name in _REGISTRY and _REGISTRY[name] is not factory:
      raise ValueError(f"method {name!r} registered twice")
    _REGISTRY[name] = factory
    return factory

  return wrap


def _load_families():
  for family in _FAMILIES:
    try:
      importlib.import_module(f"{__name__}.{family}")
    except ModuleNotFoundError as e:
      if e.name != f"{__name__}.{family}":
        raise


def available_methods() -> list[str]:
  _load_families()
  return sorted(_REGISTRY)


def get_method(name: str, config=None, *, num_features: int, list_size: int) -> Method:
  """Builds the registered method ``name``."""
  _load_families()
  if name not in _REGISTRY:
    raise KeyError(f"unknown method {name!r}; available: {sorted(_REGISTRY)}")
  import ml_collections

  config = config if config is not None else ml_collections.ConfigDict()
  return _REGISTRY[name](config, num_features=num_features, list_size=list_size)
