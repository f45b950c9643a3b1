"""The interface every trainable ULTR method implements.

A :class:`Method` bundles the pure pieces the generic training loop in
:mod:`ultr_jax.train` needs. Losses and towers stay in ``ultr_jax.losses`` and
``ultr_jax.models``; a ``Method`` only wires them together, so that naive,
IPS, DLA, LBD, CLD and SIF all run through the same jitted, sharded,
checkpointed loop.

* ``init(key, batch) -> (params, extra)``: ``params`` is the pytree the
  optimizer updates (a dict of towers, e.g. ``{"relevance": ..., "bias":
  ...}``); ``extra`` is non-differentiated method state (dual variables,
  EM propensity estimates, EMAs), or ``{}``.
* ``loss(params, extra, batch, key) -> (loss, (metrics, new_extra))``:
  ``batch`` already carries simulated ``clicks`` (and ``examination``);
  ``metrics`` is a flat dict of scalars for logging; ``new_extra`` replaces
  ``extra`` after the step (return ``extra`` unchanged if unused).
* ``score(params, batch) -> [..., L]``: relevance scores used for ranking and
  evaluation (never uses clicks or positions).
* ``propensities(params, extra) -> [num_positions]`` (optional): learned
  position propensities, relative to position 1, for reporting.
* ``click_logits(params, extra, batch) -> [..., L]`` (optional, for the
  methods that are click models): the logit of :math:`P(C_i = 1)` given the
  clicks the batch shows above item ``i`` (unconditional for the
  position-based models), which scores held-out clicks
  (:func:`ultr_jax.metrics.click_log_likelihood`,
  :func:`~ultr_jax.metrics.click_perplexity` with ``logits=True``).
* ``optimizer`` (optional): overrides the config's optimizer.
* ``requires``: the batch entries ``loss`` reads besides ``features`` and ``where`` (which every
  batch carries), e.g. ``("clicks", "examination")``; declared by the factory (they may depend on
  its config: IPS given a fixed ``propensities`` table reads no ``examination``), so a study can tell
  which click models can feed a method without tracing it (:func:`method_inputs_missing`).
* ``config``: the method's full config (its declared defaults with the user's values over them),
  set by :func:`~ultr_jax.train.get_method`; it goes into the run's fingerprint.
"""

import dataclasses
from typing import Any, Callable, Mapping, Optional

import optax

from ultr_jax.types import Array, Batch, MethodInitFn, MethodLossFn, Params, ScoreFn

__all__ = ["Method", "KEY_REASONS", "method_inputs_missing"]


@dataclasses.dataclass(frozen=True)
class Method:
  """A trainable ULTR method: pure ``init``, ``loss`` and ``score`` functions."""

  name: str
  init: MethodInitFn
  loss: MethodLossFn
  score: ScoreFn
  propensities: Optional[Callable[[Params, Any], Array]] = None
  optimizer: Optional[optax.GradientTransformation] = None
  click_logits: Optional[Callable[[Params, Any, Batch], Array]] = None
  requires: tuple[str, ...] = ()
  config: Optional[Mapping[str, Any]] = None


#: Why a missing batch entry makes a method inapplicable (the cell's "n/a: ..." text).
KEY_REASONS = {
  "shown": "needs a top-k selection log (shown mask)",
  "click_propensity": "needs the oracle click propensity pi*(1+d*) of the position_trust simulator",
  "trust_score": "needs the oracle trust score sigma(gamma z) of the position_trust simulator",
  "examination": "needs oracle examination propensities, which this click model does not report",
  "eps_plus": "needs the trust parameters (eps_plus, eps_minus) of the affine trust simulator",
  "policy_examination": "needs a stochastic logging policy's expected examination (selection='topk_sample')",
  "context": "needs per-item contexts",
  "labels": "trains on graded relevance labels",
}


def method_inputs_missing(method, batch: Mapping[str, Any]) -> Optional[str]:
  """The first entry of ``method.requires`` that ``batch`` lacks, or None when it has them all.

  ``method.requires`` is declared by the method's factory (no tracing, no parsing of errors).

  Args:
    method: a :class:`Method` (its ``requires``).
    batch: a batch dict, or any mapping of its keys.

  Returns:
    The name of the first required entry the batch lacks, or None.

  >>> import jax.numpy as jnp
  >>> from ultr_jax.train import get_method
  >>> m = get_method("cld", {}, num_features=2, list_size=3)
  >>> m.requires
  ('shown', 'clicks', 'examination')
  >>> b = {"features": jnp.ones((1, 3, 2)), "where": jnp.ones((1, 3), bool), "clicks": jnp.zeros((1, 3)),
  ...      "examination": jnp.ones((1, 3))}
  >>> method_inputs_missing(m, b)
  'shown'
  >>> method_inputs_missing(m, {**b, "shown": jnp.ones((1, 3), bool)}) is None
  True
  """
  for key in method.requires:
    if key not in batch or batch[key] is None:
      return key
  return None
