"""Registry of trainable methods: ``get_method(name, config, ...)``.

Each family lives in its own module (``baselines``, ``click_models``, ``lbd``, ``cld``,
``sif``, ``recent``) and registers factories with :func:`register`, declaring each method's config fields
and their defaults in one place. A factory has the signature
``factory(config, *, num_features, list_size) -> Method`` where ``config`` is the method's
``ml_collections.ConfigDict``: its declared defaults with the user's values over them
(:func:`get_method` refuses a key the method does not declare).
"""

import dataclasses
import importlib
from typing import Any, Callable, Mapping, Optional

import ml_collections

from ultr_jax.train.config import merge_config
from ultr_jax.train.method import Method

__all__ = ["register", "get_method", "available_methods", "method_defaults", "shared_method_configs"]

_REGISTRY: dict[str, Callable[..., Method]] = {}
_DEFAULTS: dict[str, dict[str, Any]] = {}
_FAMILIES = ("baselines", "click_models", "lbd", "cld", "sif", "recent")


def register(name: str, *, defaults: Optional[Mapping[str, Any]] = None):
  """Decorator registering a method factory under ``name`` (for :func:`get_method` and every study).

  A factory is ``factory(config, *, num_features, list_size) -> Method``; ``defaults`` declares
  every config field the method reads, with its default (None: no fields). :func:`get_method`
  merges the user's config over them and refuses any other key. Registering a second factory under
  a taken name raises ``ValueError``.

  Args:
    name: the method's name.
    defaults: the config fields the method reads, with their defaults (None: none).

  Returns:
    A decorator that registers the factory and returns it unchanged.

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
    _DEFAULTS[name] = dict(defaults or {})
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

  Returns:
    The sorted list of names.

  >>> {"naive", "ips", "dla", "lbd", "cld", "sif_full"} <= set(available_methods())
  True
  """
  _load_families()
  return sorted(_REGISTRY)


# The types of the fields whose default is None, so that a binary's locked config can take them as
# flags (an ml_collections placeholder of the type; --config.method_configs.ips.propensities=(1,0.7,...)).
_NONE_TYPES = {
  "propensities": tuple,
  "eps_plus": tuple,
  "eps_minus": tuple,
  "top_k": int,
  "num_positions": int,
  "trust_head": bool,
  "exposure_slope": bool,
  "channels": tuple,
  "risk": str,
  "lams": tuple,
  "ts": tuple,
}


def method_defaults(name: str, overrides: Optional[Mapping[str, Any]] = None) -> ml_collections.ConfigDict:
  """The config fields method ``name`` declares, with their defaults (None: "the default", e.g. the list size).

  ``overrides`` replace defaults (an unknown key raises ``ValueError``). A None default is an
  ``ml_collections`` placeholder of its type, so a binary's config section built from it takes every
  field as a flag, and refuses a misspelt one.

  Args:
    name: a registered method.
    overrides: values that replace defaults (an unknown key raises).

  Returns:
    A ``ConfigDict`` of the method's fields.

  >>> d = method_defaults("ips", {"ranker": "linear"})
  >>> d.propensity_clip, d.loss_type, d.ranker, d.propensities, "gamma" in d
  (0.0, 'listwise', 'linear', None, False)
  """
  _load_families()
  if name not in _REGISTRY:
    raise KeyError(f"unknown method {name!r}; available: {sorted(_REGISTRY)}")
  merged = merge_config(_DEFAULTS[name], overrides, what=f"method {name!r} config")
  out = ml_collections.ConfigDict()
  for k, v in merged.items():
    out[k] = ml_collections.config_dict.placeholder(_NONE_TYPES.get(k, object)) if v is None else v
  return out


def shared_method_configs(names, section) -> dict[str, ml_collections.ConfigDict]:
  """One config section shared by several methods (a study's ``config.method``): ``{name: its fields of it}``.

  Each method gets the fields of ``section`` it declares (:func:`method_defaults`), so one section configures a
  family whose members read different fields; a key that none of ``names`` declares raises ``ValueError``
  naming it (with the nearest declared key) and listing the declared ones.

  Args:
    names: the methods sharing the section.
    section: the shared config section.

  Returns:
    A dict from each name to the ``ConfigDict`` of its fields of ``section``.

  >>> c = shared_method_configs(["cld", "heckman_rank"], {"gamma": 0.3, "heckman_outcome": "probit"})
  >>> c["cld"].to_dict(), c["heckman_rank"].to_dict()
  ({'gamma': 0.3}, {'heckman_outcome': 'probit'})
  >>> shared_method_configs(["cld", "heckman_rank"], {"gama": 0.3})  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  ...
  ValueError: shared config of methods cld, heckman_rank: unknown key 'gama' (did you mean 'gamma'?); known keys: ...
  """
  _load_families()
  names = list(names)
  for name in names:
    if name not in _REGISTRY:
      raise KeyError(f"unknown method {name!r}; available: {sorted(_REGISTRY)}")
  declared = {k: None for name in names for k in _DEFAULTS[name]}
  items = dict(section.items()) if section is not None else {}
  merge_config(declared, items, what=f"shared config of methods {', '.join(names)}")  # refuses what none declares
  return {name: ml_collections.ConfigDict({k: v for k, v in items.items() if k in _DEFAULTS[name]}) for name in names}


def get_method(name: str, config=None, *, num_features: int, list_size: int) -> Method:
  """Builds the registered method ``name``.

  Args:
    name: one of :func:`available_methods`.
    config: the method's settings (a ``ConfigDict`` or mapping; None or empty
      for its defaults), e.g. ``{"ranker": "linear"}``; each family's module
      documents its fields, :func:`method_defaults` lists them. A value of None
      keeps the field's default.
    num_features: ``F`` of the batches it will see.
    list_size: ``L`` of the training lists (the number of positions for the
      methods that learn position propensities).

  Returns:
    The :class:`~ultr_jax.train.Method`.

  Raises:
    KeyError: an unknown name (the message lists the available ones).
    ValueError: a config key the method does not declare (the message names it and lists the known ones).

  >>> m = get_method("dla", {"ranker": "linear"}, num_features=4, list_size=10)
  >>> m.name, m.propensities is not None, m.requires, m.config["propensity_clip"]
  ('dla', True, ('clicks',), 0.0)
  >>> get_method("ips", {"max_weigth": 10}, num_features=4, list_size=10)  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  ...
  ValueError: method 'ips' config: unknown key 'max_weigth'; known keys: activation, ...
  """
  _load_families()
  if name not in _REGISTRY:
    raise KeyError(f"unknown method {name!r}; available: {sorted(_REGISTRY)}")
  merged = merge_config(_DEFAULTS[name], config, what=f"method {name!r} config", none_is_default=True)
  method = _REGISTRY[name](merged, num_features=num_features, list_size=list_size)
  return dataclasses.replace(method, config=merged.to_dict())
