"""Where a run's steps first went non-finite: computed inside the jitted steps at no cost on a finite step, read
on the host after the call.

Each step of a jitted ``lax.scan`` reports whether its loss and new parameters are finite (``ok``) and, only when
not (a ``lax.cond``), which of its inputs and parameter leaves hold a non-finite value (:func:`diagnose`);
:func:`first_of_call` keeps the call's first bad step, and :func:`first_nonfinite` finds the first one over the
calls. Shared by the training loop (:mod:`ultr_jax.train.step`, :mod:`ultr_jax.train.divergence`) and the minibatch
click-model fit (:mod:`ultr_jax.simulation.minibatch`).
"""

from typing import Any, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["diagnose", "first_nonfinite", "first_of_call", "nonfinite"]


def nonfinite(x: jax.Array) -> jax.Array:
  """Whether ``x`` holds a NaN or infinity (False for integer and bool arrays).

  >>> bool(nonfinite(jnp.array([1.0, jnp.inf]))), bool(nonfinite(jnp.array([1, 2])))
  (True, False)
  """
  return jnp.any(~jnp.isfinite(x)) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.zeros((), bool)


def diagnose(inputs: Mapping[str, Any], before: Any, after: Any, *, healthy: bool) -> dict:
  """``{"inputs": {name: bool}, "params_before": tree of bool, "params_after": tree of bool}``: which inputs
  (each a leaf or a tree, flagged when any of its leaves is) and parameter leaves hold a non-finite value; all
  False when ``healthy`` (the branch a finite step takes, so a ``lax.cond`` on it costs nothing then).

  >>> d = diagnose({"x": jnp.array([jnp.nan])}, {"w": jnp.ones(1)}, {"w": jnp.ones(1)}, healthy=False)
  >>> bool(d["inputs"]["x"]), bool(d["params_after"]["w"])
  (True, False)
  """
  check = (lambda x: jnp.zeros((), bool)) if healthy else nonfinite
  any_of = lambda tree: jnp.any(jnp.stack([check(x) for x in jax.tree.leaves(tree)] or [jnp.zeros((), bool)]))  # noqa: E731
  return {
    "inputs": {k: any_of(v) for k, v in inputs.items()},
    "params_before": jax.tree.map(check, before),
    "params_after": jax.tree.map(check, after),
  }


def first_of_call(ok: jax.Array, diagnosis: Mapping[str, Any], live: Optional[jax.Array] = None) -> dict:
  """The call's first bad step from its steps' ``ok`` (``bool[K]``) and diagnoses (stacked ``[K, ...]``): ``{"first":
  its index in the call (-1 when every step was finite), **its diagnosis}``; steps not ``live`` do not count.

  >>> d = {"inputs": {"x": jnp.array([False, True])}}
  >>> out = first_of_call(jnp.array([True, False]), d)
  >>> int(out["first"]), bool(out["inputs"]["x"])
  (1, True)
  """
  bad = ~ok if live is None else ~ok & live
  first = jnp.argmax(bad)
  at_first = jax.tree.map(lambda v: v[first], dict(diagnosis))
  return {"first": jnp.where(bad.any(), first, -1), **at_first}


def _flagged(tree: Any) -> list[str]:
  """The paths of the True leaves of a tree of bools."""
  return [jax.tree_util.keystr(p) for p, x in jax.tree_util.tree_leaves_with_path(tree) if bool(x)]


def first_nonfinite(diagnoses: Sequence[tuple[int, Any]]) -> Optional[dict]:
  """The first step with a non-finite loss or new parameters among the calls' ``diagnoses`` (``(first step of the call,
  diagnosis)``, in order, as :func:`first_of_call` returns them).

  Args:
    diagnoses: ``[(step, diagnosis)]``.

  Returns:
    ``{"batch": the step's batch number (0-based), "inputs": [names], "params_before": [paths],
    "params_after": [paths]}``, or None when every step was finite.

  >>> d = {"first": np.int32(1), "inputs": {"features": True, "where": False},
  ...      "params_before": {"w": False}, "params_after": {"w": True}}
  >>> first_nonfinite([(0, {**d, "first": np.int32(-1)}), (4, d)])
  {'batch': 5, 'inputs': ['features'], 'params_before': [], 'params_after': ["['w']"]}
  """
  for start, diagnosis in diagnoses:
    diagnosis = jax.device_get(diagnosis)
    first = int(np.asarray(diagnosis["first"]))
    if first >= 0:
      return {
        "batch": int(start) + first,
        "inputs": sorted(k for k, v in diagnosis["inputs"].items() if bool(v)),
        "params_before": _flagged(diagnosis["params_before"]),
        "params_after": _flagged(diagnosis["params_after"]),
      }
  return None
