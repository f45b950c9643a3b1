"""Private optimisation helper shared across layers (imports jax and optax only)."""

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

__all__ = ["lbfgs_minimize"]


def lbfgs_minimize(
  fn: Callable[[Any], jax.Array], params: Any, *, max_iters: int, tol: float
) -> tuple[Any, jax.Array, jax.Array]:
  """Minimises a smooth scalar ``fn`` by ``optax.lbfgs`` (zoom line search) in a ``lax.while_loop``.

  Stops when the gradient norm is at most ``tol`` or after ``max_iters`` (static) iterations. Returns
  ``(params, grad_norm, iterations)``; jittable, so vmap and jit compose with it.
  """
  opt = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(fn)

  def step(state):
    params, opt_state, _, it = state
    value, grad = value_and_grad(params, state=opt_state)
    updates, opt_state = opt.update(grad, opt_state, params, value=value, grad=grad, value_fn=fn)
    return optax.apply_updates(params, updates), opt_state, optax.tree.norm(grad), it + 1

  def cond(state):
    return (state[2] > tol) & (state[3] < max_iters)

  params, _, gnorm, iters = jax.lax.while_loop(
    cond, step, (params, opt.init(params), jnp.asarray(jnp.inf), jnp.int32(0))
  )
  return params, gnorm, iters
