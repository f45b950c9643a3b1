r"""Click models: pure, jittable samplers over ``[..., list_size]``.

Every model has the signature ``model(key, attraction, ..., *, where=None,
positions=None, top_k=None, num_sessions=None, num_impressions=None) ->
dict`` where ``attraction`` is the click probability given examination
(:func:`~ultr_jax.simulation.relevance_probability` of the labels) and the
returned dict holds

* ``clicks``: ``float32[..., L]`` 0/1 clicks (one session per list), or
  ``float32[S, ..., L]`` with ``num_sessions=S``, or the click-through rate
  ``Binomial(N, p) / N`` with ``num_impressions=N`` (aggregated mode, as the
  identifiability datasets use; then also ``click_counts``);
* ``examination``: the true marginal examination probability of each item at
  its position (the oracle IPS propensity), 0 where masked or not shown;
* ``click_prob``: the true marginal click probability of each item;
* ``conditional_click_prob``: (sessions only, not with ``num_impressions``)
  :math:`P(C_i = 1 \mid c_{<i})`, the true probability of each item's click
  given the sampled clicks above it in display order, shaped like ``clicks``:
  what a click model's held-out perplexity scores, so the generating model's
  own perplexity is the floor (in expectation) of a fitted one. It is ``click_prob``
  where clicks are independent given the list (PBM, trust, context-PBM,
  individual) and the model's filter otherwise (:meth:`ChainModel.conditional_click_prob`,
  :meth:`UBM.conditional_click_prob`, :meth:`Mixture.filter_log_probs`);
* ``shown``: ``bool[..., L]`` when ``top_k`` is set (items beyond ``k`` are
  not displayed and never clicked; CLD's selection indicator).

Padded items (``where`` False) never click and do not change the other
items' probabilities. ``vmap`` adds queries; ``num_sessions`` adds a leading
sessions axis. :func:`make_click_fn` builds the ``click_fn(key, batch)`` the
training loop calls inside its jitted step from an ``ml_collections`` config: a
frozen, hashable :class:`ClickSimulator`.

Every model is a :class:`~ultr_jax.simulation.click_models.base.ClickModel`
(one module each, with all of its math: sampler, exact marginals, conditional click probabilities, session
log-likelihood, sufficient statistics and its fitted :attr:`~ClickModel.parameters`) in one registry
(:func:`get_click_model`, :func:`click_models`); adding a model is its module plus one line of ``_MODELS``
below.
"""

import dataclasses

from typing import Any, Callable

import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp
import numpy as np  # noqa: F401 (the doctests')

from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models.base import (
  BiasIndexed,
  ClickChain,
  ClickModel,
  LogSampler,
  OwnClickFunction,
  SessionChecker,
  StatisticsReduction,
  Parameter,
  Session,
  bernoulli_log_likelihood,
  click_models,
  freeze,
  get_click_model,
  register,
  statistics_reduction,
  thaw,
)
from ultr_jax.simulation.click_models.cascade import Cascade, cascade
from ultr_jax.simulation.click_models.ccm import CCM, ccm
from ultr_jax.simulation.click_models.chain import ChainModel
from ultr_jax.simulation.click_models.context_pbm import IDENTIFIABILITY_CONTEXT_W, ContextPBM, context_pbm
from ultr_jax.simulation.click_models.dbn import DBN, dbn
from ultr_jax.simulation.click_models.dcm import DCM, dcm
from ultr_jax.simulation.click_models.individual import Individual, individual
from ultr_jax.simulation.click_models.mixture import Mixture, mixture
from ultr_jax.simulation.click_models.pbm import PBM, PBMTable, pbm, pbm_table
from ultr_jax.simulation.click_models.position_trust import (
  PositionTrust,
  PositionTrustSimulator,
  make_position_trust_click_fn,
  position_trust,
)
from ultr_jax.simulation.click_models.samplers import sample_clicks
from ultr_jax.simulation.click_models.sdbn import SDBN, sdbn
from ultr_jax.simulation.click_models.trust import Trust, trust
from ultr_jax.simulation.click_models.ubm import UBM, ubm
from ultr_jax.types import Array, Batch, ClickFn, PRNGKey

__all__ = [
  "sample_clicks",
  "bernoulli_log_likelihood",
  "pbm",
  "pbm_table",
  "trust",
  "cascade",
  "dcm",
  "dbn",
  "ccm",
  "sdbn",
  "ubm",
  "context_pbm",
  "individual",
  "mixture",
  "position_trust",
  "make_position_trust_click_fn",
  "PositionTrustSimulator",
  "IDENTIFIABILITY_CONTEXT_W",
  "click_models",
  "get_click_model",
  "register",
  "make_click_fn",
  "click_simulator",
  "ClickModel",
  "ClickChain",
  "StatisticsReduction",
  "BiasIndexed",
  "SessionChecker",
  "LogSampler",
  "OwnClickFunction",
  "statistics_reduction",
  "ChainModel",
  "ClickSimulator",
  "Parameter",
  "Session",
  "PBM",
  "PBMTable",
  "Trust",
  "Cascade",
  "DCM",
  "DBN",
  "CCM",
  "SDBN",
  "UBM",
  "ContextPBM",
  "Individual",
  "Mixture",
  "PositionTrust",
]

# The registry, one line per model (the fittable ones first, in the order the click-model study reports them).
_MODELS = (PBM, UBM, Cascade, DCM, DBN, CCM, Trust, PBMTable, ContextPBM, Individual, SDBN, Mixture, PositionTrust)
for _model in _MODELS:
  register(_model)


def _as_dict(config: Any) -> dict:
  if hasattr(config, "to_dict"):
    config = config.to_dict()
  return {k: v for k, v in dict(config).items() if v is not None}


@dataclasses.dataclass(frozen=True)
class ClickSimulator:
  """A click model with its simulation config: ``click_fn(key, batch) -> dict`` (:func:`make_click_fn`).

  Frozen and hashable by value (the config's arrays are held as tuples), so equal configs give equal
  functions: a static argument of ``jax.jit`` or a compile-cache key.

  Attributes:
    model: the :class:`ClickModel`.
    kwargs: its simulation keyword arguments (:meth:`ClickModel.simulation_kwargs`), frozen, sorted.
    relevance: ``(kind, eps, eps_plus, ymax, threshold)`` of the label -> attraction mapping.
    top_k: the display cut-off (None: every item shown).
    num_sessions: sessions per list (None: one, no sessions axis).
    num_impressions: impressions per list in the aggregated mode (None: sessions).
  """

  model: ClickModel
  kwargs: tuple
  relevance: tuple
  top_k: Any = None
  num_sessions: Any = None
  num_impressions: Any = None

  def attraction(self, labels: Array) -> Array:
    """The click probability given examination of graded ``labels``.

    Args:
      labels: ``[..., L]`` graded relevance labels.

    Returns:
      ``float32[..., L]``: :func:`~ultr_jax.simulation.relevance_probability` of the labels (graded relevance)
      or :func:`~ultr_jax.simulation.binary_relevance_probability` (binary), with the config's parameters.
    """
    kind, eps, eps_plus, ymax, threshold = self.relevance
    if kind == "binary":
      return P.binary_relevance_probability(labels, threshold=threshold, eps=eps, eps_plus=eps_plus)
    return P.relevance_probability(labels, eps=eps, eps_plus=eps_plus, ymax=ymax)

  def __call__(self, key: PRNGKey, batch: Batch) -> dict:
    if "labels" not in batch or "where" not in batch:
      raise ValueError("click_fn: batch needs 'labels' and 'where'")
    inputs = {}
    for k in self.model.batch_inputs:
      if k not in batch:
        raise ValueError(f"click_fn: {self.model.name} needs batch[{k!r}]")
      inputs[k] = batch[k]
    common = {k: getattr(self, k) for k in ("top_k", "num_sessions", "num_impressions") if getattr(self, k) is not None}
    return self.model.simulate(
      key,
      self.attraction(batch["labels"]),
      where=jnp.asarray(batch["where"], bool),
      positions=batch.get("positions"),
      **common,
      **{k: thaw(v) for k, v in self.kwargs},
      **inputs,
    )


def make_click_fn(config: Any) -> ClickFn:
  r"""Builds ``click_fn(key, batch) -> dict`` from a config.

  ``config`` (an ``ml_collections.ConfigDict`` or mapping) holds ``name``
  (one of :func:`click_models`) and optionally (a key set to None is not set: the default applies)

  * relevance: ``relevance`` (``"graded"``, default, or ``"binary"``),
    ``eps`` (0.1), ``eps_plus`` (1.0), ``ymax`` (4), ``threshold`` (3, binary);
  * ``top_k``, ``num_sessions``, ``num_impressions``;
  * the model's own keys (:attr:`ClickModel.config_keys`; any other key is an error):
    ``eta`` (1.0; the models with a position table: pbm, ubm, trust, pbm_table,
    context_pbm, individual, position_trust),
    ``table`` (pbm_table/trust/ubm/context_pbm/individual), ``epsilon_1_neg``
    (trust, 0.65), ``continuation`` (dcm, 0.5; scalar or per position);
  * dbn: ``perseverance`` (0.9) and ``satisfaction`` (default the
    attraction; scalar or per position); ccm: ``alpha`` ((0.9, 0.8, 0.2));
  * ubm: ``gamma``, a ``[K, K + 1]`` (rank, last-click state) examination
    table (default :meth:`UBM.gamma_table` of ``table`` and ``eta``);
  * context_pbm: ``context_vectors`` ``[T, D]`` or ``num_contexts``
    (+ ``context_dim`` 10, ``context_scale`` 0.35, ``context_seed`` 0) and
    ``w`` (default the identifiability repo's vector); reads
    ``batch["context"]``;
  * individual: ``crux_indices`` (feature indices) and ``w``; reads
    ``batch["features"]``;
  * sdbn: ``satisfaction`` (default the attraction); mixture: ``components``
    (the components' configs, default PBM and DCM) and ``weights`` (uniform).

  ``batch`` is the standard batch dict (``labels``, ``where``, optional
  ``positions``, ``features``, ``context``). The result holds ``clicks``
  (float32), ``examination`` (oracle propensities), ``click_prob`` and, with
  ``top_k``, ``shown`` (see the module docstring). The function is the bound
  ``__call__`` of a frozen :class:`ClickSimulator` (``fn.__self__``, or
  :func:`click_simulator`): equal configs give equal, hashable simulators, so
  the simulator can be a static argument or a compile-cache key.

  Args:
    config: the click-model config, an ``ml_collections.ConfigDict`` or a mapping (keys above).

  Returns:
    ``click_fn(key, batch) -> dict``: the bound ``__call__`` of :func:`click_simulator` of the config, or the
    model's own click function where it has one (:class:`OwnClickFunction`, e.g. position_trust).

  Raises:
    ValueError: for an unknown model name or config key (naming it and listing the known ones).

  >>> fn = make_click_fn({"name": "pbm_table", "eta": 1.0, "eps": 0.1})
  >>> out = fn(jax.random.key(0), {"labels": jnp.array([4.0, 0.0]), "where": jnp.ones(2, bool)})
  >>> print(out["click_prob"])
  [0.68  0.061]
  """
  cfg = _as_dict(config)
  name = cfg.get("name")
  if isinstance(name, str) and name in click_models():
    model = get_click_model(name)
    model.check_config(cfg)
    if isinstance(model, OwnClickFunction):
      return model.click_function(cfg)
  return click_simulator(cfg).__call__


def click_simulator(config: Any) -> ClickSimulator:
  """The frozen :class:`ClickSimulator` of a config (see :func:`make_click_fn`).

  Args:
    config: the click-model config, an ``ml_collections.ConfigDict`` or a mapping (keys as :func:`make_click_fn`).

  Returns:
    The :class:`ClickSimulator`: the model, its frozen keyword arguments, relevance mapping and sampling mode.

  Raises:
    ValueError: for an unknown model name or config key, or a ``relevance`` other than ``"graded"`` or
      ``"binary"``.

  >>> click_simulator({"name": "dcm"}) == click_simulator({"name": "dcm", "continuation": 0.5})
  True
  """
  cfg = _as_dict(config)
  name = cfg.get("name")
  if not isinstance(name, str) or name not in click_models():
    raise ValueError(f"click_model.name: unknown click model {name!r}; expected one of {click_models()}")
  model = get_click_model(name)
  model.check_config(cfg)
  relevance = cfg.get("relevance", "graded")
  if relevance not in ("graded", "binary"):
    raise ValueError(f"click_model.relevance: expected 'graded' or 'binary', got {relevance!r}")
  rel = (relevance, cfg.get("eps", 0.1), cfg.get("eps_plus", 1.0), cfg.get("ymax", 4), cfg.get("threshold", 3))
  common = {k: int(cfg[k]) for k in ("top_k", "num_sessions", "num_impressions") if k in cfg}
  kwargs = model.simulation_kwargs(cfg)
  return ClickSimulator(model, tuple(sorted((k, freeze(v)) for k, v in kwargs.items())), freeze(rel), **common)
