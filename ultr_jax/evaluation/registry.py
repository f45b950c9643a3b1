r"""The estimator registry: name -> :class:`EstimatorSpec` (the function, its declared inputs, its assumption).

Every estimator is called as ``spec.fn(scores, clicks, *, where=..., weights=..., top_k=..., temperature=...,
session_weights=..., **inputs)`` with ``inputs`` exactly the names in ``spec.inputs`` (``logging``: the logging
policy's :class:`~ultr_jax.evaluation.Propensities`; ``doc_ids``, ``model``, ``params``: a fitted click model;
``propensities``: examination propensities; ``key``: a PRNG key for a Plackett-Luce target), so tests and
studies draw their cases from :data:`ESTIMATORS` and nothing branches on an estimator's name.
"""

import functools
from typing import Callable, NamedTuple, Protocol

from ultr_jax.evaluation import direct, estimators
from ultr_jax.evaluation._common import Estimate

__all__ = ["Estimator", "EstimatorSpec", "ESTIMATORS", "get_estimator", "available_estimators"]


class Estimator(Protocol):
  """An estimator of a target ranker's expected reward per session from a click log."""

  def __call__(self, scores, clicks, *, where=None, weights=None, top_k=None, **inputs) -> Estimate: ...


class EstimatorSpec(NamedTuple):
  """A registered estimator.

  Attributes:
    fn: the :class:`Estimator` (``self_normalize`` and ``kind`` already bound).
    inputs: the keyword inputs it needs besides the log (``logging``, ``doc_ids``, ``model``, ``params``,
      ``propensities``, ``key``).
    self_normalize: whether it is the self-normalised variant.
    assumption: the click behaviour under which it is unbiased (``"any"``, ``"pbm"``, ``"cascade"``,
      ``"model"``: the click model is right, ``"pbm_or_model"``, ``"cascade_or_model"``).
    clip: whether it takes a weight ``clip``.
  """

  fn: Callable[..., Estimate]
  inputs: tuple[str, ...]
  self_normalize: bool
  assumption: str
  clip: bool = True


_MODEL = ("doc_ids", "model", "params")


def _spec(fn, inputs, assumption, sn=False, clip=True, **bound):
  if sn:
    bound["self_normalize"] = True
  return EstimatorSpec(functools.partial(fn, **bound) if bound else fn, inputs, sn, assumption, clip)


#: name -> :class:`EstimatorSpec`.
ESTIMATORS: dict[str, EstimatorSpec] = {
  "sips": _spec(estimators.standard_ips, ("logging",), "any"),
  "snsips": _spec(estimators.standard_ips, ("logging",), "any", sn=True),
  "iips": _spec(estimators.independent_ips, ("logging",), "pbm"),
  "sniips": _spec(estimators.independent_ips, ("logging",), "pbm", sn=True),
  "rips": _spec(estimators.reward_interaction_ips, ("logging",), "cascade"),
  "snrips": _spec(estimators.reward_interaction_ips, ("logging",), "cascade", sn=True),
  "pi": _spec(estimators.pseudo_inverse, ("logging",), "pbm"),
  "snpi": _spec(estimators.pseudo_inverse, ("logging",), "pbm", sn=True),
  "dm": _spec(direct.direct_method, _MODEL, "model", clip=False),
  "dr": _spec(direct.doubly_robust, ("logging",) + _MODEL, "pbm_or_model", kind="independent"),
  "sndr": _spec(direct.doubly_robust, ("logging",) + _MODEL, "pbm_or_model", sn=True, kind="independent"),
  "sdr": _spec(direct.doubly_robust, ("logging",) + _MODEL, "any", kind="standard"),
  "snsdr": _spec(direct.doubly_robust, ("logging",) + _MODEL, "any", sn=True, kind="standard"),
  "cascade_dr": _spec(direct.cascade_doubly_robust, ("logging",) + _MODEL, "cascade_or_model"),
  "sncascade_dr": _spec(direct.cascade_doubly_robust, ("logging",) + _MODEL, "cascade_or_model", sn=True),
  "click_dcg": _spec(estimators.click_dcg, ("propensities",), "pbm"),
}


def get_estimator(name: str) -> EstimatorSpec:
  """The registered estimator ``name``.

  Raises:
    ValueError: for an unknown name, listing the registered ones.

  >>> get_estimator("rips").inputs, get_estimator("rips").assumption
  (('logging',), 'cascade')
  """
  if name not in ESTIMATORS:
    raise ValueError(f"unknown estimator {name!r}; expected one of {tuple(ESTIMATORS)}")
  return ESTIMATORS[name]


def available_estimators(assumption: "str | None" = None) -> tuple[str, ...]:
  """Names of the registered estimators (all, or those unbiased under ``assumption``).

  >>> available_estimators("cascade")
  ('rips', 'snrips')
  """
  return tuple(n for n, s in ESTIMATORS.items() if assumption is None or s.assumption == assumption)
