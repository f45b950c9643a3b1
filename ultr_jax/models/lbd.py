r"""The LBD tower: one shared network with a relevance head and per-position observation heads.

LBD (Chen, Liu, Liu, Sun, "LBD: Decouple Relevance and Observation for
Individual-Level Unbiased Learning to Rank", NeurIPS 2022), Section 5 and the
authors' ``DNN_multi.py`` / ``Linear_multi.py``: a single network maps the
features of a document to ``1 + n`` logits,

.. math::
    (s_{rel}(x), s_{obs,1}(x), \dots, s_{obs,n}(x)) = \mathrm{MLP}(x),

where :math:`s_{rel} \approx \log \hat r(x)` ranks the documents and
:math:`s_{obs,p} \approx \log \hat o_p(x)` is the observation logit of
position ``p`` (the head is *selected* by the displayed position, the position
is never an input). The DNN variant has ``LayerNorm(eps=1e-3) -> Dense -> ELU``
per hidden layer and ``LayerNorm -> Dense(1 + n)`` at the output (a LayerNorm
in front of *every* dense layer, Keras' epsilon); the Linear variant
(``hidden_sizes=()``) is ``LayerNorm -> Dense(1 + n)``. Weights *and* biases
use Glorot-uniform initialisation (TF1 ``get_variable`` defaults).
"""

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["LBDTower", "glorot_bias_init"]


def glorot_bias_init(key, shape, dtype=jnp.float32):
  r"""Glorot-uniform for a bias vector, as TF1's ``get_variable`` default does.

  TF1 treats a 1-D variable of size ``n`` as fan_in = fan_out = n, so the
  limit is :math:`\sqrt{6 / (2n)} = \sqrt{3/n}`.

  Args:
    key: a PRNG key.
    shape: the bias's shape ``(n,)``.
    dtype: its dtype.

  Returns:
    An array of ``shape`` uniform in :math:`[-\sqrt{3/n}, \sqrt{3/n}]`.

  >>> b = glorot_bias_init(jax.random.key(0), (12,))
  >>> print(bool(jnp.all(jnp.abs(b) <= jnp.sqrt(3 / 12))))
  True
  """
  limit = jnp.sqrt(3.0 / shape[-1])
  return jax.random.uniform(key, shape, dtype, -limit, limit)


class LBDTower(nn.Module):
  r"""Shared-trunk tower returning ``(s_rel [...], s_obs [..., n])`` for features ``[..., F]``.

  Attributes:
    num_positions: ``n``, the number of observation heads (one per displayed
      position).
    hidden_sizes: trunk widths; ``(512, 256, 128)`` is the paper's DNN,
      ``()`` the LinearMulti ranker.
    layer_norm: put a LayerNorm (``epsilon=1e-3``) before every dense layer
      (the paper's rankers); ``False`` gives a plain (affine, for
      ``hidden_sizes=()``) model, used by the closed-form tests.
    num_outputs: allocated outputs, ``>= 1 + num_positions`` (the repo has
      ``2 + 2n`` of which only ``1 + n`` are read); extra outputs are unused.

  >>> tower = LBDTower(num_positions=3, hidden_sizes=(8,))
  >>> x = jnp.ones((2, 5, 4))
  >>> params = tower.init(jax.random.key(0), x)
  >>> s_rel, s_obs = tower.apply(params, x)
  >>> print(s_rel.shape, s_obs.shape)
  (2, 5) (2, 5, 3)
  """

  num_positions: int
  hidden_sizes: Sequence[int] = (512, 256, 128)
  layer_norm: bool = True
  num_outputs: int = 0
  ln_epsilon: float = 1e-3

  @nn.compact
  def __call__(self, features):
    n_out = max(int(self.num_outputs), 1 + self.num_positions)
    h = features
    for width in self.hidden_sizes:
      if self.layer_norm:
        h = nn.LayerNorm(epsilon=self.ln_epsilon)(h)
      h = nn.elu(nn.Dense(width, kernel_init=nn.initializers.glorot_uniform(), bias_init=glorot_bias_init)(h))
    if self.layer_norm:
      h = nn.LayerNorm(epsilon=self.ln_epsilon)(h)
    out = nn.Dense(n_out, kernel_init=nn.initializers.glorot_uniform(), bias_init=glorot_bias_init)(h)
    return out[..., 0], out[..., 1 : 1 + self.num_positions]
