"""Shared types and the batch layout used across ultr_jax.

A batch of ranked lists is a ``dict`` of arrays whose trailing axis is the
list (``[..., list_size]``; features ``[..., list_size, num_features]``),
padded to a fixed ``list_size`` and masked by the bool array ``where``.
Item ``i`` of a list is the document displayed at position ``i`` (0-based)
by the logging policy, unless the batch carries an explicit ``positions``.

Standard keys (all optional except ``where``):

================  ==========================  =====================================
key               shape / dtype               meaning
================  ==========================  =====================================
``features``      ``[..., L, F]`` float32     query-document ranking features
``where``         ``[..., L]`` bool           True for real items, False for padding
``labels``        ``[..., L]`` float32        graded relevance 0..4 (evaluation only)
``positions``     ``[..., L]`` int32          0-based displayed rank
``clicks``        ``[..., L]`` float32        0/1 clicks (or CTRs in aggregated mode)
``examination``   ``[..., L]`` float32        true examination probability (oracle
                                              propensity; from the simulator)
``doc_ids``       ``[..., L]`` int32          document ids, -1 for padding
``qid``           ``[...]`` int32             query ids
``shown``         ``[..., L]`` bool           top-k selection indicator (CLD)
``context``       ``[...]`` int32             context type (context-dependent PBM)
================  ==========================  =====================================

The interfaces the library's pieces implement are stated here as typed Protocols, as optax states
``GradientTransformation``'s ``init``/``update`` and rax its ``LossFn``: a loss (:class:`LossFn`, with any
:class:`ReduceFn`), a click function (:class:`ClickFn`), a stateful estimator's pair
(:class:`EstimatorInitFn`, :class:`EstimatorUpdateFn`) and a trainable method's functions
(:class:`MethodInitFn`, :class:`MethodLossFn`, :class:`ScoreFn`). Any function of the stated form satisfies
them; nothing inherits from them.
"""

from typing import Any, Mapping, Optional, Protocol, Union

import jax

Array = jax.Array
Batch = Mapping[str, Array]
Params = Any
PRNGKey = jax.Array

__all__ = [
  "Array",
  "Batch",
  "ClickFn",
  "EstimatorInitFn",
  "EstimatorUpdateFn",
  "LossFn",
  "MethodInitFn",
  "MethodLossFn",
  "Params",
  "PRNGKey",
  "ReduceFn",
  "ScoreFn",
]


class ReduceFn(Protocol):
  """A reduction over masked values: ``jnp.mean``, ``jnp.sum`` or any ``f(values, where=mask)``."""

  def __call__(self, values: Array, /, *, where: Optional[Array] = None) -> Array: ...


class LossFn(Protocol):
  """A loss in rax's calling convention.

  ``fn(prediction, target, *, where=None, weights=None, reduce_fn=jnp.mean, **named_inputs)``: the prediction
  ``[..., L]`` (scores, click probabilities, per-item losses), the clicks or labels ``[..., L]``, the bool mask
  ``where``, per-item ``weights`` and the named extra inputs of :mod:`ultr_jax.losses`' vocabulary
  (``propensities=``, ``observation_logits=``, ...). Returns a scalar, the per-item or per-list values with
  ``reduce_fn=None``, or ``(loss, aux)`` with ``return_aux=True``.
  """

  # The keywords (where=, weights=, reduce_fn= and the loss's own named inputs, some required) differ from loss to
  # loss, so the Protocol states the two positional arrays and leaves the keywords open: ``*args: Any, **kwargs: Any``
  # is how a type checker spells "any further parameters" (a function with only some of them still matches).
  def __call__(self, prediction: Array, target: Array, /, *args: Any, **named_inputs: Any) -> Union[Array, tuple]: ...


class ClickFn(Protocol):
  """A click simulator: ``click_fn(key, batch) -> {"clicks", "examination", "click_prob", ...}``.

  ``batch`` holds the layout's arrays (``labels``, ``where`` and what the click model declares it reads);
  the result's arrays are ``[..., L]``. :func:`ultr_jax.simulation.make_click_fn` builds one from a config.
  """

  def __call__(self, key: PRNGKey, batch: Batch, /) -> Mapping[str, Array]: ...


class EstimatorInitFn(Protocol):
  """``init(...) -> state``: a stateful estimator's initial state (a pytree)."""

  def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


class EstimatorUpdateFn(Protocol):
  """``update(state, *inputs, **named_inputs) -> state``: pure, jittable, no gradient through the state."""

  def __call__(self, state: Any, *args: Any, **kwargs: Any) -> Any: ...


class MethodInitFn(Protocol):
  """``init(key, batch) -> (params, extra)``: a method's trainable pytree and its non-trained state."""

  def __call__(self, key: PRNGKey, batch: Batch, /) -> tuple[Params, Any]: ...


class MethodLossFn(Protocol):
  """``loss(params, extra, batch, key) -> (loss, (metrics, new_extra))`` of one training step."""

  def __call__(self, params: Params, extra: Any, batch: Batch, key: PRNGKey, /) -> tuple[Array, tuple[dict, Any]]: ...


class ScoreFn(Protocol):
  """``score(params, batch) -> [..., L]``: relevance scores that rank the lists (never reads clicks)."""

  def __call__(self, params: Params, batch: Batch, /) -> Array: ...
