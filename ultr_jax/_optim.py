"""Private optimisation helpers shared across layers (imports jax and optax only)."""

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax

__all__ = ["lbfgs_minimize", "table_curvature"]


def lbfgs_minimize(
  fn: Callable[[Any], jax.Array], params: Any, *, max_iters: int, tol: float, scale: Optional[Any] = None
) -> tuple[Any, jax.Array, jax.Array]:
  r"""Minimises a smooth scalar ``fn`` by ``optax.lbfgs`` (zoom line search) in a ``lax.while_loop``.

  Stops when the gradient norm :math:`\lVert\nabla f(\theta)\rVert` is at most ``tol`` or after ``max_iters``
  (static) iterations. With ``scale`` (a pytree of positive arrays like ``params``, :math:`d`) it minimises
  :math:`g(\phi) = f(\phi / d)` over :math:`\phi = d\,\theta` instead: a diagonal preconditioner, so that
  parameters whose curvatures differ by orders of magnitude (a document seen ten times beside a rank seen
  a million times) converge together; :math:`d = \sqrt{\operatorname{diag} \nabla^2 f}` makes the diagonal of
  :math:`\nabla^2 g` one. It then stops when both :math:`\lVert\nabla f\rVert` and
  :math:`\lVert\nabla g\rVert = \lVert\nabla f / d\rVert` (a Newton step's length: the rule that does not let a
  flat direction stop early) are at most ``tol``; ``grad_norm`` is :math:`\lVert\nabla f\rVert`.
  Returns ``(params, grad_norm, iterations)``; jittable, so vmap and jit compose with it.
  """
  if scale is None:
    objective, start = fn, params
  else:
    objective = lambda phi: fn(jax.tree.map(jnp.divide, phi, scale))
    start = jax.tree.map(jnp.multiply, params, scale)
  opt = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(objective)

  def grad_norms(grad):
    """``(|grad f|, the norm the loop stops on)``."""
    if scale is None:
      norm = optax.tree.norm(grad)
      return norm, norm
    norm = optax.tree.norm(jax.tree.map(jnp.multiply, grad, scale))
    return norm, jnp.maximum(norm, optax.tree.norm(grad))

  def step(state):
    params, opt_state, _, _, it = state
    value, grad = value_and_grad(params, state=opt_state)
    updates, opt_state = opt.update(grad, opt_state, params, value=value, grad=grad, value_fn=objective)
    return optax.apply_updates(params, updates), opt_state, *grad_norms(grad), it + 1

  def cond(state):
    return (state[3] > tol) & (state[4] < max_iters)

  inf = jnp.asarray(jnp.inf)
  params, _, gnorm, _, iters = jax.lax.while_loop(cond, step, (start, opt.init(start), inf, inf, jnp.int32(0)))
  return (params if scale is None else jax.tree.map(jnp.divide, params, scale)), gnorm, iters


def table_curvature(fn: Callable[[dict], jax.Array], params: dict, floor: jax.Array) -> dict:
  r"""A diagonal curvature of ``fn`` at ``params`` (a dict of parameter tables), for :func:`lbfgs_minimize`'s
  ``scale``: per table :math:`T`, the Hessian-vector product with ones on :math:`T` (zeros elsewhere),
  restricted to :math:`T`,

  .. math::
      h_i = \sum_{j \in T} \frac{\partial^2 f}{\partial \theta_i \partial \theta_j}, \qquad i \in T,

  which is the exact diagonal when no term of ``fn`` couples two entries of one table (a click model's
  per-item records: one document, one rank), and a row sum otherwise; :math:`|h|` floored at ``floor``
  (e.g. the prior's curvature). One HVP per table.
  """
  grad = jax.grad(fn)
  out = {}
  for name in params:
    tangent = {k: (jnp.ones_like(v) if k == name else jnp.zeros_like(v)) for k, v in params.items()}
    out[name] = jnp.maximum(jnp.abs(jax.jvp(grad, (params,), (tangent,))[1][name]), floor)
  return out
