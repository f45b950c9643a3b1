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
  """Decorator registering a method factory under ``name`` (for :func:`get_method` and every study).

  A factory is ``factory(config, *, num_features, list_size) -> Method``; registering a second
  factory under a taken name raises ``ValueError``.

  >>> import jax.numpy as jnp
  >>> from ultr_jax.train.method import Method
  >>> @register("doc_linear_pointwise")
  ... def _factory(config, *, num_features, list_size):
  ...   def loss(params, extra, batch, key):
  ...     scores = batch["features"] @ params["w"]
  ...     return jnp.mean((scores - batch["clicks"]) ** 2), ({}, extra)
  ...   return Method(name="doc_linear_pointwise", loss=loss,
  ...                 init=lambda key, batch: ({"w": jnp.zeros(num_features)}, {}),
  ...                 score=lambda params, batch: batch["features"] @ params["w"])
  >>> get_method("doc_linear_pointwise", num_features=3, list_size=5).name
  'doc_linear_pointwise'
  """

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
  """The registered method names, sorted.

  >>> {"naive", "ips", "dla", "lbd", "cld", "sif_full"} <= set(available_methods())
  True
  """
  _load_families()
  return sorted(_REGISTRY)


def get_method(name: str, config=None, *, num_features: int, list_size: int) -> Method:
  """Builds the registered method ``name``.

  Args:
    name: one of :func:`available_methods`.
    config: the method's settings (a ``ConfigDict`` or mapping; None or empty
      for its defaults), e.g. ``{"ranker": "linear"}``; each family's module
      documents its fields.
    num_features: ``F`` of the batches it will see.
    list_size: ``L`` of the training lists (the number of positions for the
      methods that learn position propensities).

  Returns:
    The :class:`~ultr_jax.train.Method`.

  Raises:
    KeyError: an unknown name (the message lists the available ones).

  >>> m = get_method("dla", {"ranker": "linear"}, num_features=4, list_size=10)
  >>> m.name, m.propensities is not None
  ('dla', True)
  """
  _load_families()
  if name not in _REGISTRY:
    raise KeyError(f"unknown method {name!r}; available: {sorted(_REGISTRY)}")
  import ml_collections

  config = config if config is not None else ml_collections.ConfigDict()
  return _REGISTRY[name](config, num_features=num_features, list_size=list_size)
