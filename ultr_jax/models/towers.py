r"""Flax linen towers for ULTR: rankers, observation (bias) towers, two-tower.

Every tower maps per-item inputs on the last list axis to one logit per item,
``[..., L, F] -> [..., L]`` (feature towers) or ``[..., L] -> [..., L]``
(id towers: document ids, positions), with arbitrary leading dims. Towers act
on each item independently, so padding never changes another item's score.
Parameters are plain pytrees (``module.init(key, x)["params"]``); a
:class:`~ultr_jax.train.Method` keeps one pytree per tower.

>>> import flax.linen as nn
>>> ranker = MLPRanker(hidden_sizes=(8,))
>>> x = jnp.ones((2, 5, 3))
>>> params = ranker.init(jax.random.key(0), x)
>>> ranker.apply(params, x).shape
(2, 5)
"""

import math
from typing import Any, Callable, Sequence, cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from ultr_jax.losses.two_tower import two_tower_log_probs

__all__ = [
  "apply_array",
  "LinearRanker",
  "MLPRanker",
  "DocumentEmbedding",
  "PositionBias",
  "ContextPositionBias",
  "FeatureBias",
  "TwoTower",
  "combine_towers",
  "make_ranker",
  "num_params",
  "ACTIVATIONS",
]

#: The activations a ranker takes by name (:func:`make_ranker`'s ``activation``).
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
  "relu": nn.relu,
  "elu": nn.elu,
  "gelu": nn.gelu,
  "tanh": jnp.tanh,
  "sigmoid": nn.sigmoid,
  "silu": nn.silu,
}


class LinearRanker(nn.Module):
  r"""Linear ranker :math:`s(x) = w^\top x + b`, ``[..., L, F] -> [..., L]``.

  ``input_norm=True`` puts a LayerNorm on the features first, :math:`s(x) = w^\top
  \mathrm{LN}(x) + b`: the Linear ranker of the ULTRA/LBD code (not linear in :math:`x`).

  >>> m = LinearRanker()
  >>> p = m.init(jax.random.key(0), jnp.ones((4, 3)))
  >>> num_params(p)
  4
  >>> num_params(LinearRanker(input_norm=True).init(jax.random.key(0), jnp.ones((4, 3))))  # + LN scale, offset
  10
  """

  use_bias: bool = True
  input_norm: bool = False
  ln_epsilon: float = 1e-6
  output_size: int = 1  # > 1: a vector per item, [..., L, output_size] (Vectorization)

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool = True) -> jax.Array:
    del deterministic
    if self.input_norm:
      x = nn.LayerNorm(epsilon=self.ln_epsilon, name="norm_in")(x)
    out = nn.Dense(self.output_size, use_bias=self.use_bias, name="out")(x)
    return out[..., 0] if self.output_size == 1 else out


class MLPRanker(nn.Module):
  r"""Feed-forward ranker, ``[..., L, F] -> [..., L]``.

  Each hidden layer is ``Dense -> [LayerNorm] -> activation -> [Dropout]``,
  followed by a ``Dense(1)`` output. With ``norm_position="before"`` the
  LayerNorm comes before every dense layer instead, the input and the output
  layer included (``LayerNorm -> Dense -> activation``, then ``LayerNorm ->
  Dense(1)``): the ULTRA/LBD code's DNN. LBD's default tower is
  ``hidden_sizes=(512, 256, 128)``, ``activation="elu"``, ``layer_norm=True``
  (Chen et al., "Scalar is Not Enough: Vectorization-based Unbiased Learning
  to Rank", KDD'22 / LBD NeurIPS'22 appendix).

  Dropout needs ``deterministic=False`` and an rng named ``"dropout"``.
  ``output_size > 1`` gives a vector per item, ``[..., L, output_size]``.

  >>> m = MLPRanker(hidden_sizes=(4,))
  >>> p = m.init(jax.random.key(0), jnp.ones((3, 2)))
  >>> num_params(p)  # (2*4+4) + (4+4 LayerNorm) + (4+1)
  25
  >>> p = MLPRanker(hidden_sizes=(4,), norm_position="before").init(jax.random.key(0), jnp.ones((3, 2)))
  >>> num_params(p)  # (2+2 LayerNorm) + (2*4+4) + (4+4 LayerNorm) + (4+1)
  29
  """

  hidden_sizes: Sequence[int] = (512, 256, 128)
  activation: str = "elu"
  layer_norm: bool = True
  dropout: float = 0.0
  norm_position: str = "after"  # "after" each hidden dense layer, or "before" every dense layer
  ln_epsilon: float = 1e-6
  output_size: int = 1  # > 1: a vector per item, [..., L, output_size] (Vectorization)

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool = True) -> jax.Array:
    if self.activation not in ACTIVATIONS:
      raise ValueError(f"unknown activation {self.activation!r}; one of {sorted(ACTIVATIONS)}")
    if self.norm_position not in ("after", "before"):
      raise ValueError(f"norm_position must be 'after' or 'before', got {self.norm_position!r}")
    act = ACTIVATIONS[self.activation]
    before = self.layer_norm and self.norm_position == "before"
    for i, size in enumerate(self.hidden_sizes):
      if before:
        x = nn.LayerNorm(epsilon=self.ln_epsilon, name=f"norm_{i}")(x)
      x = nn.Dense(int(size), name=f"dense_{i}")(x)
      if self.layer_norm and not before:
        x = nn.LayerNorm(epsilon=self.ln_epsilon, name=f"norm_{i}")(x)
      x = act(x)
      if self.dropout > 0:
        x = nn.Dropout(self.dropout)(x, deterministic=deterministic)
    if before:
      x = nn.LayerNorm(epsilon=self.ln_epsilon, name="norm_out")(x)
    out = nn.Dense(self.output_size, name="out")(x)
    return out[..., 0] if self.output_size == 1 else out


class DocumentEmbedding(nn.Module):
  r"""A free relevance logit per document id, ``[..., L] int -> [..., L]``.

  :math:`s(d) = \theta_d`. Padding ids (``-1``) are clipped to 0; mask them
  in the loss.

  >>> m = DocumentEmbedding(num_docs=5)
  >>> p = m.init(jax.random.key(0), jnp.zeros((2,), jnp.int32))
  >>> num_params(p)
  5
  """

  num_docs: int
  init_std: float = 0.0

  @nn.compact
  def __call__(self, doc_ids: jax.Array, *, deterministic: bool = True) -> jax.Array:
    del deterministic
    table = self.param(
      "logits", nn.initializers.normal(self.init_std) if self.init_std else nn.initializers.zeros, (self.num_docs,)
    )
    return jnp.take(table, jnp.clip(doc_ids, 0, self.num_docs - 1), axis=0)


class PositionBias(nn.Module):
  r"""A free observation logit per position, ``[..., L] int -> [..., L]``.

  :math:`o(k) = \theta_k` for 0-based position ``k``; positions beyond
  ``num_positions - 1`` share the last logit.

  >>> m = PositionBias(num_positions=10)
  >>> p = m.init(jax.random.key(0), jnp.arange(3))
  >>> num_params(p), float(m.apply(p, jnp.arange(3)).sum())
  (10, 0.0)
  """

  num_positions: int

  @nn.compact
  def __call__(self, positions: jax.Array, *, deterministic: bool = True) -> jax.Array:
    del deterministic
    table = self.param("logits", nn.initializers.zeros, (self.num_positions,))
    return jnp.take(table, jnp.clip(positions, 0, self.num_positions - 1), axis=0)


class ContextPositionBias(nn.Module):
  r"""A free observation logit per (context, position) pair.

  ``__call__(positions [..., L], contexts [...] or [..., L]) -> [..., L]``,
  :math:`o(c, k) = \theta_{c,k}` (context-dependent PBM, as in the
  identifiability paper's context-aware settings).

  >>> m = ContextPositionBias(num_contexts=3, num_positions=4)
  >>> p = m.init(jax.random.key(0), jnp.arange(4), jnp.array(1))
  >>> num_params(p)
  12
  """

  num_contexts: int
  num_positions: int

  @nn.compact
  def __call__(self, positions: jax.Array, contexts: jax.Array, *, deterministic: bool = True) -> jax.Array:
    del deterministic
    table = self.param("logits", nn.initializers.zeros, (self.num_contexts, self.num_positions))
    contexts = jnp.asarray(contexts)
    if contexts.ndim < positions.ndim:
      contexts = contexts[..., None]
    c = jnp.clip(contexts, 0, self.num_contexts - 1)
    k = jnp.clip(positions, 0, self.num_positions - 1)
    return table[c, k]


class FeatureBias(nn.Module):
  r"""Observation logit from bias features (an MLP), ``[..., L, B] -> [..., L]``.

  :math:`o(z) = \mathrm{MLP}(z)`, e.g. over one-hot positions, the display
  type or the device (feature-based propensity models).

  >>> m = FeatureBias(hidden_sizes=())
  >>> p = m.init(jax.random.key(0), jnp.ones((5, 2)))
  >>> num_params(p)
  3
  """

  hidden_sizes: Sequence[int] = (32,)
  activation: str = "elu"
  layer_norm: bool = False
  dropout: float = 0.0

  @nn.compact
  def __call__(self, z: jax.Array, *, deterministic: bool = True) -> jax.Array:
    return MLPRanker(
      hidden_sizes=self.hidden_sizes,
      activation=self.activation,
      layer_norm=self.layer_norm,
      dropout=self.dropout,
      name="mlp",
    )(z, deterministic=deterministic)


def combine_towers(relevance_logits: jax.Array, observation_logits: jax.Array, *, mode: str = "additive") -> jax.Array:
  r"""Click log-probability of a two-tower model, ``[..., L] -> [..., L]``.

  * ``"additive"``: :math:`\log P(C=1) = \log\sigma(r + o)` (additive logits,
    e.g. Zhuang et al. 2021, Yan et al. 2022);
  * ``"product"``: :math:`\log P(C=1) = \log\sigma(r) + \log\sigma(o)`
    (PBM: :math:`P(C=1) = P(R=1)\,P(E=1)`, Richardson et al. 2007).

  Args:
    relevance_logits: ``[..., L]`` the relevance tower's logits :math:`r`.
    observation_logits: ``[..., L]`` the observation tower's logits :math:`o`.
    mode: ``"additive"`` or ``"product"``.

  Returns:
    ``[..., L]`` the click log-probabilities :math:`\log P(C = 1)`.

  >>> float(jnp.exp(combine_towers(jnp.array(0.0), jnp.array(0.0), mode="product")))
  0.25
  """
  return two_tower_log_probs(relevance_logits, observation_logits, mode=mode)[0]


class TwoTower(nn.Module):
  r"""A relevance tower and a bias tower combined into a click model.

  ``__call__(relevance_inputs, bias_inputs) -> (relevance_logits,
  observation_logits)``, both ``[..., L]``; :func:`combine_towers` turns them
  into click log-probabilities. Rank by the relevance logits only
  (``module.apply(params, x, method="score")``).

  >>> m = TwoTower(relevance=LinearRanker(), bias=PositionBias(num_positions=3))
  >>> p = m.init(jax.random.key(0), jnp.ones((3, 2)), jnp.arange(3))
  >>> r, o = m.apply(p, jnp.ones((3, 2)), jnp.arange(3))
  >>> r.shape, o.shape, num_params(p)
  ((3,), (3,), 6)
  """

  relevance: nn.Module
  bias: nn.Module
  mode: str = "additive"

  def __call__(self, relevance_inputs, bias_inputs, *, deterministic: bool = True):
    return (
      self.relevance(relevance_inputs, deterministic=deterministic),
      self.bias(bias_inputs, deterministic=deterministic),
    )

  def click_log_prob(self, relevance_inputs, bias_inputs, *, deterministic: bool = True):
    r, o = self(relevance_inputs, bias_inputs, deterministic=deterministic)
    return combine_towers(r, o, mode=self.mode)

  def score(self, relevance_inputs, *, deterministic: bool = True):
    return self.relevance(relevance_inputs, deterministic=deterministic)


def make_ranker(
  kind: str = "mlp",
  *,
  hidden_sizes: Sequence[int] = (512, 256, 128),
  activation: str = "elu",
  layer_norm: bool = True,
  dropout: float = 0.0,
  norm_position: str = "after",
  ln_epsilon: float = 1e-6,
  output_size: int = 1,
) -> nn.Module:
  """A ranker by name: ``"linear"`` or ``"mlp"``.

  ``norm_position="before"`` is the ULTRA/LBD code's layout (a LayerNorm before every dense layer;
  for ``"linear"``, on the input when ``layer_norm`` is also set); ``"after"`` (default) puts it after
  each hidden dense layer and leaves ``"linear"`` plain.

  Args:
    kind: ``"linear"`` or ``"mlp"``.
    hidden_sizes: the MLP's hidden layer sizes.
    activation: the MLP's activation, by name (``"elu"``, ``"relu"``, ...).
    layer_norm: add LayerNorms (where: ``norm_position``).
    dropout: the dropout rate after each hidden layer (training only).
    norm_position: ``"after"`` or ``"before"`` each dense layer (see above).
    ln_epsilon: the LayerNorms' epsilon.
    output_size: the number of outputs per item (1: a score).

  Returns:
    A flax linen module mapping ``[..., F]`` features to ``[..., output_size]`` outputs (the last axis squeezed when
    ``output_size`` is 1).

  >>> type(make_ranker("linear")).__name__
  'LinearRanker'
  >>> make_ranker("linear", norm_position="before").input_norm
  True
  """
  if norm_position not in ("after", "before"):
    raise ValueError(f"norm_position must be 'after' or 'before', got {norm_position!r}")
  if kind == "linear":
    return LinearRanker(
      input_norm=bool(layer_norm) and norm_position == "before",
      ln_epsilon=float(ln_epsilon),
      output_size=int(output_size),
    )
  if kind == "mlp":
    return MLPRanker(
      hidden_sizes=tuple(int(h) for h in hidden_sizes),
      activation=activation,
      layer_norm=layer_norm,
      dropout=float(dropout),
      norm_position=norm_position,
      ln_epsilon=float(ln_epsilon),
      output_size=int(output_size),
    )
  raise ValueError(f"unknown ranker {kind!r} (linear, mlp)")


def num_params(params) -> int:
  """Number of scalar parameters in a pytree (arrays or ``jax.eval_shape`` output).

  Args:
    params: a pytree of arrays or of ``jax.ShapeDtypeStruct``.

  Returns:
    The total number of scalars.

  >>> num_params({"a": jnp.ones((2, 3)), "b": jnp.ones(4)})
  10
  """
  return int(sum(math.prod(x.shape) for x in jax.tree.leaves(params)))


def apply_array(module: nn.Module, variables: Any, *args: Any, **kwargs: Any) -> jax.Array:
  """``module.apply(variables, *args, **kwargs)``, the module's output array.

  flax types ``apply``'s result as ``Any | (output, mutated variables)`` (the pair only with ``mutable=``); the
  towers here return one array and are applied without ``mutable``, so this states it for a type checker.

  Args:
    module: a flax module whose ``__call__`` returns an array.
    variables: its variables (``{"params": ...}``).
    *args: the call's inputs.
    **kwargs: ``apply``'s keywords (``rngs=``, ``deterministic=``, ``method=``).

  Returns:
    The module's output.

  >>> m = LinearRanker()
  >>> x = jnp.ones((2, 3, 4))
  >>> apply_array(m, m.init(jax.random.key(0), x), x).shape
  (2, 3)
  """
  return cast(jax.Array, module.apply(variables, *args, **kwargs))
