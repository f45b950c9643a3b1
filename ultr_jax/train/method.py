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
* ``optimizer`` (optional): overrides the config's optimizer.
"""

import dataclasses
from typing import Any, Callable, Optional

import optax

from ultr_jax.types import Array, Batch, Params, PRNGKey

__all__ = ["Method"]


@dataclasses.dataclass(frozen=True)
class Method:
  """A trainable ULTR method: pure ``init``, ``loss`` and ``score`` functions."""

  name: str
  init: Callable[[PRNGKey, Batch], tuple[Params, Any]]
  loss: Callable[[Params, Any, Batch, PRNGKey], tuple[Array, tuple[dict, Any]]]
  score: Callable[[Params, Batch], Array]
  propensities: Optional[Callable[[Params, Any], Array]] = None
  optimizer: Optional[optax.GradientTransformation] = None
