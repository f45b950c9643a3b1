r"""Click chains (cascade, DCM, DBN, CCM, SDBN): the shared parts of their simulators and likelihoods.

A chain user examines the items in display order and goes on after item ``i`` with probability
:math:`c^0_i` without a click and :math:`c^1_i` after one; each model is its continuations
(:meth:`ChainModel.continuations` from probabilities, :meth:`ChainModel.log_continuations` in log space).
"""

import dataclasses

import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp
import numpy as np

from ultr_jax.simulation import likelihood as LL
from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models.base import ClickModel, Session, display_order, full_mask, rank_table
from ultr_jax.simulation.click_models.samplers import sample_chain_clicks

__all__ = ["ChainModel", "chain_session", "check_probabilities"]


def chain_session(r, shown, positions, given_positions, c0, c1, top_k) -> Session:
  """A click chain's :class:`Session`, the chain run in order of ``positions``."""
  if given_positions:
    order, inverse = display_order(positions, shown)
    take = lambda x: x if isinstance(x, float) else jnp.take_along_axis(x, order, axis=-1)
    r_s, shown_s, c0_s, c1_s = take(r), take(shown), take(c0), take(c1)
  else:
    r_s, shown_s, c0_s, c1_s = r, shown, c0, c1
    order = inverse = None
  exam_s = P.chain_examination(r_s, continue_no_click=c0_s, continue_click=c1_s, where=shown_s)
  sample = lambda key, num_sessions: sample_chain_clicks(
    key, r_s, continue_no_click=c0_s, continue_click=c1_s, where=shown_s, num_sessions=num_sessions
  )
  conditional = lambda c: LL.chain_conditional_click_prob(
    c, r_s, continue_no_click=c0_s, continue_click=c1_s, where=shown_s
  )
  return sequential_session(exam_s, r, shown, sample, conditional, order, inverse, top_k)


def sequential_session(exam_s, r, shown, sample, conditional, order, inverse, top_k) -> Session:
  """A sequential model's :class:`Session` from its display-order examination, sampler and filter."""
  exam = exam_s if inverse is None else jnp.take_along_axis(exam_s, jnp.broadcast_to(inverse, exam_s.shape), axis=-1)
  return Session(exam, exam * r, shown, False, sample, conditional, inverse, order, top_k=top_k)


def check_probabilities(name, value):
  """Probabilities in [0, 1] (a scalar or a sequence), else a ValueError naming the config key."""
  values = np.atleast_1d(np.asarray(value, np.float64))
  if values.size == 0 or np.any(~((values >= 0) & (values <= 1))):
    raise ValueError(f"click_model.{name}: expected probabilities, got {value!r}")
  return tuple(float(v) for v in value) if isinstance(value, (list, tuple)) else float(value)


@dataclasses.dataclass(frozen=True)
class ChainModel(ClickModel):
  """Base of the click chains: the likelihood, predictions and sampler from the continuations."""

  chain = True

  def continuations(self, attraction, **params):
    raise NotImplementedError

  def fitted_continuations(self, a, params):
    """``(c0, c1)`` of the fitted parameters (probabilities; tables by item index, per-item ``[..., L]``)."""
    raise NotImplementedError

  def log_continuations(self, log_a, log_1ma, log_bias, ranks, table):
    """``(log c0, log c1)`` from log-probabilities (``table(name)``: a bias table per item)."""
    raise NotImplementedError

  def log_probs(self, clicks, log_a, log_1ma, log_bias, *, ranks=None, where=None):
    c = jnp.asarray(clicks, jnp.float32)
    log_a = jnp.broadcast_to(jnp.asarray(log_a, jnp.float32), c.shape)
    log_1ma = jnp.broadcast_to(jnp.asarray(log_1ma, jnp.float32), c.shape)
    where = full_mask(c, where)
    table = lambda name: rank_table(log_bias[name], ranks, c.shape)
    log_c0, log_c1 = self.log_continuations(log_a, log_1ma, log_bias, ranks, table)
    return LL.chain_log_probs(c, log_a, log_1ma, log_continue_no_click=log_c0, log_continue_click=log_c1, where=where)

  def predict(self, clicks, a, params, *, where):
    c0, c1 = self.fitted_continuations(a, params)
    cond = LL.chain_conditional_click_prob(clicks, a, continue_no_click=c0, continue_click=c1, where=where)
    marginal = P.chain_examination(a, continue_no_click=c0, continue_click=c1, where=where) * a
    return cond, marginal

  def sample(self, key, a, params, *, where=None, num_sessions=None):
    c0, c1 = self.fitted_continuations(a, params)
    return sample_chain_clicks(key, a, continue_no_click=c0, continue_click=c1, where=where, num_sessions=num_sessions)
