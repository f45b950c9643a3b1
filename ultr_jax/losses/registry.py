r"""The loss registry: every ULTR loss declared once, beside its definition, with its family and named inputs.

A loss joins the registry with the :func:`register_loss` decorator on its definition; its named inputs are read
from its signature (the required keyword-only arguments, which follow the vocabulary of :mod:`ultr_jax.losses`),
so the declaration cannot drift from the function. :data:`LOSSES` maps each loss's public name to its
:class:`LossSpec`. The invariant tests (mask equals truncation, vmap equals a loop, all-masked lists give finite
zero gradients, ``check_grads``, any ``reduce_fn``) draw their cases from it, so a new loss is tested by being
declared, as a click model is by being registered:

.. code-block:: python

    @register_loss("ips")
    def my_ips_loss(scores, clicks, *, propensities, where=None, weights=None, reduce_fn=jnp.mean):
      ...

>>> from ultr_jax import losses
>>> spec = losses.LOSSES["ips_softmax_loss"]
>>> spec.family, spec.inputs
('ips', ('propensities',))
"""

import dataclasses
import inspect
from typing import Callable, TypeVar

from ultr_jax.types import LossFn

__all__ = ["LOSSES", "LossSpec", "register_loss"]


@dataclasses.dataclass(frozen=True)
class LossSpec:
  """One registered loss.

  Attributes:
    name: the loss's public name in :mod:`ultr_jax.losses`.
    fn: the loss, ``fn(prediction, target, *, where=None, weights=None, reduce_fn=jnp.mean, **inputs)``
      (:class:`~ultr_jax.types.LossFn`).
    family: the method family it belongs to (``"naive"``, ``"ips"``, ``"dla"``, ...).
    prediction: the name of its first argument, what it scores: ``"scores"`` (logits), ``"click_probs"``,
      ``"loss"`` (per-item losses) or ``"mean"`` (a density's means ``[..., L, d]``).
    target: the name of its second argument: ``"clicks"``, ``"labels"``, ``"targets"`` or ``"exposure"``.
    inputs: its named extra inputs, in signature order (the required keyword-only arguments).
    trains: the named inputs it is differentiated with respect to besides the prediction (a bias tower's
      logits, a selection model's scores), so a tower learns through them.
    per_list: True when the batch loss is the mean of independent per-list losses; False when lists interact
      (SNIPS normalises by the whole batch).
    parts: the number of non-negative parts it sums, each reduced on its own (DLA: 2).
  """

  name: str
  fn: LossFn
  family: str
  prediction: str
  target: str
  inputs: tuple[str, ...]
  trains: tuple[str, ...] = ()
  per_list: bool = True
  parts: int = 1


_Loss = TypeVar("_Loss", bound=LossFn)  # the decorated loss keeps its own signature

#: Every registered loss by its public name (see :func:`register_loss`).
LOSSES: dict[str, LossSpec] = {}


def _signature_parts(fn: LossFn) -> tuple[str, str, tuple[str, ...]]:
  """The names of ``fn``'s two positional arguments and its required keyword-only ones."""
  params = inspect.signature(inspect.unwrap(fn)).parameters.values()
  positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
  required = tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is p.empty)
  if len(positional) != 2:
    raise ValueError(f"a loss takes (prediction, target) positionally; {getattr(fn, '__name__')} takes {positional}")
  return positional[0], positional[1], required


def register_loss(
  family: str, *, trains: tuple[str, ...] = (), per_list: bool = True, parts: int = 1
) -> Callable[[_Loss], _Loss]:
  """Declares the decorated function a loss of ``family`` in :data:`LOSSES` and returns it unchanged.

  Args:
    family: the method family (``"ips"``, ``"cld"``, ...).
    trains: the named inputs the loss is differentiated with respect to (see :class:`LossSpec`).
    per_list: False when the lists of a batch interact (a batch-level normalisation).
    parts: the number of non-negative parts the loss sums, each reduced on its own.

  Returns:
    A decorator that records the function (under its ``__name__``) and returns it as it is.

  Raises:
    ValueError: a second loss of the same name, a loss whose signature does not take the prediction and the
      target positionally, or a ``trains`` entry that is not one of its named inputs.

  >>> @register_loss("example")
  ... def doubled_loss(scores, clicks, *, where=None, weights=None, reduce_fn=None):
  ...   return 2.0 * scores
  >>> LOSSES.pop("doubled_loss").target
  'clicks'
  """

  def decorator(fn: _Loss) -> _Loss:
    name = getattr(fn, "__name__")
    if name in LOSSES:
      raise ValueError(f"loss {name!r} is registered twice")
    prediction, target, inputs = _signature_parts(fn)
    unknown = set(trains) - set(inputs)
    if unknown:
      raise ValueError(f"{name}: trains={sorted(unknown)} are not among its named inputs {inputs}")
    LOSSES[name] = LossSpec(name, fn, family, prediction, target, inputs, tuple(trains), per_list, parts)
    return fn

  return decorator
