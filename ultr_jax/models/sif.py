r"""SIF-ref's bias tower (the "propensity model" of ultr_jax's reference design of SIF).

Inputs are the position and the bias source :math:`z` (the standardised
logging score) only, never the features:

.. math::
    e_i = \sigma(a_k + u_k z_i), \qquad
    d_i = \sigma(c_k + \gamma_D z_i)\,\mathbb{1}[k \le k_{top}], \qquad
    \rho_i = e_i (1 + d_i), \qquad
    \hat r_i = \sigma(\beta_0\,\mathrm{sg}(s_i) + b_0)

with init :math:`a = u = 0`, :math:`c = -2`, :math:`\beta_0 = 1`,
:math:`b_0 = 0`. ``learn_gamma_D`` replaces the fixed slope
:math:`\gamma_D` by a learned per-position :math:`v_k` (init
:math:`\gamma_D`); ``exposure_slope=False`` freezes :math:`u \equiv 0`
(position-only exposure); ``trust_head=False`` gives :math:`d \equiv 0`.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["SIFBiasTower"]


class SIFBiasTower(nn.Module):
  r"""Exposure and trust heads over (position, bias source).

  ``__call__(positions int[..., L], z [..., L]) -> dict`` with
  ``exposure_logit``, ``exposure`` :math:`e`, ``trust`` :math:`d` (0 beyond
  ``k_top`` or with the head off) and ``click_propensity`` :math:`\rho`.
  :meth:`calibrate` maps frozen ranker scores to :math:`\hat r`.
  Positions are 0-based; positions beyond ``num_positions - 1`` share the
  last parameters.

  >>> tower = SIFBiasTower(num_positions=4, k_top=2)
  >>> p = tower.init(jax.random.key(0), jnp.arange(4), jnp.zeros(4))
  >>> out = tower.apply(p, jnp.arange(4), jnp.zeros(4))
  >>> [round(float(v), 4) for v in out["click_propensity"]]
  [0.5596, 0.5596, 0.5, 0.5]
  """

  num_positions: int
  k_top: int = 3
  gamma_d: float = 1.0
  trust_head: bool = True
  learn_gamma_d: bool = False
  exposure_slope: bool = True
  trust_init: float = -2.0

  def setup(self):
    k = self.num_positions
    self.a = self.param("exposure_bias", nn.initializers.zeros, (k,))
    if self.exposure_slope:
      self.u = self.param("exposure_slope", nn.initializers.zeros, (k,))
    kt = max(1, min(self.k_top, k))
    if self.trust_head:
      self.c = self.param("trust_bias", nn.initializers.constant(self.trust_init), (kt,))
      if self.learn_gamma_d:
        self.v = self.param("trust_slope", nn.initializers.constant(self.gamma_d), (kt,))
    self.beta0 = self.param("calibration_scale", nn.initializers.ones, ())
    self.b0 = self.param("calibration_bias", nn.initializers.zeros, ())

  def __call__(self, positions: jax.Array, z: jax.Array) -> dict:
    k = jnp.clip(positions, 0, self.num_positions - 1)
    z = jnp.asarray(z, jnp.float32)
    logit = jnp.take(self.a, k)
    if self.exposure_slope:
      logit = logit + jnp.take(self.u, k) * z
    e = jax.nn.sigmoid(logit)
    if self.trust_head:
      kt = self.c.shape[0]
      kc = jnp.clip(k, 0, kt - 1)
      slope = jnp.take(self.v, kc) if self.learn_gamma_d else self.gamma_d
      d = jnp.where(positions < kt, jax.nn.sigmoid(jnp.take(self.c, kc) + slope * z), 0.0)
    else:
      d = jnp.zeros_like(e)
    return {"exposure_logit": logit, "exposure": e, "trust": d, "click_propensity": e * (1.0 + d)}

  def calibrate(self, scores: jax.Array) -> jax.Array:
    """:math:`\\hat r = \\sigma(\\beta_0\\,\\mathrm{sg}(s) + b_0)`."""
    return jax.nn.sigmoid(self.beta0 * jax.lax.stop_gradient(scores) + self.b0)
