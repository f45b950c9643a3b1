"""The compile-once helper (``tests/conftest.py``) passes on a function that compiles once and fails on ones
that retrace on values."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import check_compiles_once


def _loss(scores, labels, scale):
  return jnp.mean(scale * (scores - labels) ** 2)


def _args(i):
  rng = np.random.default_rng(i)
  return (jnp.asarray(rng.normal(size=(4, 5)), jnp.float32), jnp.asarray(rng.normal(size=(4, 5)), jnp.float32)), {
    "scale": 0.5 + 0.1 * i  # a weak-typed Python float whose value changes
  }


def test_a_pure_function_compiles_once():
  out = check_compiles_once(_loss, _args)[-1]
  scores, labels = _args(2)[0]
  np.testing.assert_allclose(out, 0.7 * np.mean((np.asarray(scores) - np.asarray(labels)) ** 2), rtol=1e-6)
  check_compiles_once(jax.jit(_loss), _args, jit=False)  # a library entry point that jits inside


def test_fails_on_a_static_float_argument():
  static = jax.jit(lambda s, y, scale: _loss(s, y, scale), static_argnums=2)
  with pytest.raises(AssertionError, match="compiled 2 more times"):
    check_compiles_once(lambda s, y, scale: static(s, y, scale), _args, jit=False)


def test_fails_on_a_fresh_jit_closing_over_a_python_float():
  def entry_point(scores, labels, scale):  # a new program per call, the float baked into it
    return jax.jit(functools.partial(lambda s, y, c: _loss(s, y, c), c=float(scale)))(scores, labels)

  with pytest.raises(AssertionError, match="compiled 2 more times"):
    check_compiles_once(entry_point, _args, jit=False)


def test_fails_when_the_traced_signature_changes():
  def args(i):  # a Python int one call, a float the next: the weak type changes, so jit traces again
    (s, y), _ = _args(i)
    return (s, y), {"scale": 1 if i == 0 else 0.5}

  with pytest.raises(AssertionError, match="traced 2 times"):
    check_compiles_once(_loss, args)
