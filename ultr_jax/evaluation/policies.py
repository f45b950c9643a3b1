r"""The probabilities a ranking policy gives the logged rankings: what the importance weights are made of.

A policy over a list of ``L`` items (``[..., L]``, display order of the logged session, valid items first) is

* **deterministic** (``temperature=0``): the items sorted by ``scores`` (descending, ties by index), or
* **Plackett-Luce** (``temperature > 0``): :math:`\pi(y) = \prod_t e^{z_{y_t}} / \sum_{u \ge t} e^{z_{y_u}}`
  with :math:`z = s / \tau` over the valid items (Plackett, JRSS-C 1975; Luce 1959).

:func:`plackett_luce_propensities` gives, for the logged ranking :math:`a` (item :math:`j` shown at position
:math:`j`), the probability of its top-:math:`K` prefix (standard IPS), of every prefix :math:`a_{1:l}`
(reward-interaction IPS, exact: a product of softmaxes), of each item at its own position (independent IPS)
and optionally the full item-position matrix and the pairwise item-position matrix (the pseudo-inverse
estimator). The item-position marginals of a Plackett-Luce policy have no closed form; they are exact by
enumerating the :math:`L!/(L-K)!` top-:math:`K` prefixes where that is at most ``max_enumeration``, and
Monte-Carlo averages over Gumbel-max samples otherwise, with their standard error.
"""

import itertools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import rax

from ultr_jax.evaluation import _common as C
from ultr_jax.types import Array, PRNGKey

__all__ = ["Propensities", "plackett_luce_propensities", "target_ranks", "dcg_weights", "num_prefixes"]


class Propensities(NamedTuple):
  r"""A policy's probabilities of the logged rankings (display order; item :math:`j` shown at position :math:`j`).

  Attributes:
    ranking: ``[...]`` :math:`\pi(a_{1:K})`, the logged top-:math:`K` ranking.
    prefix: ``[..., L]`` :math:`\pi(a_{1:l+1})`, every prefix (1 beyond the valid items).
    item_position: ``[..., L]`` :math:`\pi(y_l = a_l)`, each logged item at its logged position.
    item_position_stderr: ``[..., L]`` Monte-Carlo standard error of ``item_position`` (0 where exact).
    matrix: ``[..., L, L]`` :math:`\pi(y_k = j)` (item :math:`j`, position :math:`k < K`), or None.
    pairs: ``[..., L L, L L]`` :math:`\pi(y_k = j, y_{k'} = j')` over the flattened (item, position) pairs
      (``j * L + k``), or None.
  """

  ranking: Array
  prefix: Array
  item_position: Array
  item_position_stderr: Array
  matrix: Optional[Array] = None
  pairs: Optional[Array] = None


def target_ranks(scores: Array, *, where: Optional[Array] = None) -> Array:
  """0-based rank of each item when sorted by ``scores`` (descending, ties by index, masked items last).

  Args:
    scores: ``[..., L]``.
    where: ``bool[..., L]``.

  Returns:
    ``int32[..., L]``.

  >>> print(target_ranks(jnp.array([0.1, 0.9, 0.5])))
  [2 0 1]
  """
  return (rax.utils.ranks(jnp.asarray(scores, jnp.float32), where=where) - 1).astype(jnp.int32)


def dcg_weights(list_size: int, *, top_k: Optional[int] = None) -> Array:
  r"""DCG's position discounts :math:`1 / \log_2(l + 2)` for 0-based position :math:`l` (0 from ``top_k`` on).

  Args:
    list_size: ``L``.
    top_k: cut-off (None: all positions).

  Returns:
    ``float32[L]``.

  >>> print(np.asarray(dcg_weights(3, top_k=2)).round(4))
  [1.     0.6309 0.    ]
  """
  pos = jnp.arange(list_size)
  w = 1.0 / jnp.log2(pos + 2.0)
  return jnp.where(pos < (list_size if top_k is None else top_k), w, 0.0)


def num_prefixes(list_size: int, top_k: Optional[int] = None) -> int:
  """The number of top-``K`` prefixes of ``list_size`` items, :math:`L! / (L - K)!`.

  Args:
    list_size: the number of items :math:`L`.
    top_k: the prefix length :math:`K` (None: ``L``).

  Returns:
    The count, an int.

  >>> num_prefixes(5, 2)
  20
  """
  k = list_size if top_k is None else min(top_k, list_size)
  return int(np.prod(np.arange(list_size - k + 1, list_size + 1), dtype=np.int64))


def _mask(scores, where):
  return (
    jnp.ones(jnp.shape(scores), bool) if where is None else jnp.broadcast_to(jnp.asarray(where, bool), scores.shape)
  )


def _cut(list_size, top_k):
  return list_size if top_k is None else max(1, min(int(top_k), list_size))


def _prefix_log_probs(z: Array, where: Array) -> Array:
  r""":math:`\log \pi(a_{1:l+1})` of the display order, ``[..., L]`` (exact recursion: a cumulative sum of log-softmaxes)."""
  s = jnp.where(where, z, -jnp.inf)
  suffix = jax.lax.cumlogsumexp(s, axis=s.ndim - 1, reverse=True)
  step = jnp.where(where, s - jnp.where(where, suffix, 0.0), 0.0)
  return jnp.cumsum(step, axis=-1)


def prefix_probs(scores: Array, where: Array, temperature: float) -> Array:
  r""":math:`\pi(a_{1:l+1})` ``[..., L]`` of the display order, exact (deterministic or Plackett-Luce)."""
  C.check_options(temperature=temperature)
  if temperature == 0:
    ranks = target_ranks(scores, where=where)
    hit = (ranks == jnp.arange(scores.shape[-1])) | ~where
    return jnp.cumprod(hit.astype(jnp.float32), axis=-1)
  z = jnp.where(where, scores / temperature, 0.0)
  return jnp.exp(_prefix_log_probs(z, where))


def _deterministic(scores, where, k, matrix, pairs):
  ranks = target_ranks(scores, where=where)
  size = scores.shape[-1]
  hit = (ranks == jnp.arange(size)) | ~where
  prefix = jnp.cumprod(hit.astype(jnp.float32), axis=-1)
  onehot = jax.nn.one_hot(ranks, size) * (where & (ranks < k))[..., None]
  flat = onehot.reshape(onehot.shape[:-2] + (size * size,))
  return Propensities(
    ranking=prefix[..., k - 1],
    prefix=prefix,
    item_position=jnp.where(where & (jnp.arange(size) < k), hit, True).astype(jnp.float32),
    item_position_stderr=jnp.zeros(scores.shape),
    matrix=onehot if matrix else None,
    pairs=flat[..., :, None] * flat[..., None, :] if pairs else None,
  )


def _prefix_table(size: int, k: int) -> tuple[np.ndarray, np.ndarray]:
  """All top-``k`` prefixes ``[P, k]`` and, per prefix and step, the items chosen before it ``bool[P, k, L]``."""
  perms = np.array(list(itertools.permutations(range(size), k)), np.int32).reshape(-1, k)
  chosen = np.eye(size, dtype=np.int32)[perms]  # [P, k, L]: the item chosen at each step
  before = (np.cumsum(chosen, axis=1) - chosen) > 0  # an exclusive cumulative sum over the steps
  return perms, before


def masked_last(z: Array, where: Array) -> Array:
  """``z`` with each masked item's score far below every valid one's, decreasing in its index: a Plackett-Luce
  ranking then puts the masked items last, in index order, with probability 1 (as the layout does). Computed from
  ``z`` (not from the mask alone), so XLA never constant-folds the enumerations built on it."""
  size = z.shape[-1]
  low = jnp.min(jnp.where(where, z, jnp.inf), axis=-1, keepdims=True)
  low = jnp.where(jnp.isfinite(low), low, 0.0)
  return jnp.where(where, z, low - 1e4 * (1.0 + jnp.arange(size)))


def _enumerated_probs(z: Array, where: Array, perms: np.ndarray, before: np.ndarray) -> Array:
  """Probabilities ``[P]`` of every prefix of one list ``z [L]`` (a masked item only after every valid one,
  masked items in index order)."""
  zz = masked_last(z, where)
  lse = jax.nn.logsumexp(jnp.where(before, -jnp.inf, zz), axis=-1)  # [P, k] over the items not yet chosen
  return jnp.exp(jnp.sum(zz[perms] - lse, axis=-1))


def _enumerated_marginals(z, where, k, pairs):
  """Item-position matrix ``[..., L, L]`` (and pairs) by enumeration of the top-``k`` prefixes."""
  size = z.shape[-1]
  perms, before = _prefix_table(size, k)
  onehot = np.zeros((perms.shape[0], size, size), np.float32)
  onehot[np.arange(perms.shape[0])[:, None], perms, np.arange(k)[None, :]] = 1.0
  flat = jnp.asarray(onehot.reshape(perms.shape[0], size * size))

  def one(zz, ww):
    p = _enumerated_probs(zz, ww, perms, before)
    f = flat * jnp.repeat(ww, size)  # masked items are in no (item, position) pair
    mat = jnp.einsum("p,pi->i", p, f).reshape(size, size)
    pair = jnp.einsum("p,pi,pj->ij", p, f, f) if pairs else None
    return mat, pair

  lead = z.shape[:-1]
  zf, wf = z.reshape((-1, size)), where.reshape((-1, size))
  per_row = perms.shape[0] * (k * size + (size**4 if pairs else size * size))
  batch = max(1, min(zf.shape[0], (1 << 22) // per_row))  # rows vmapped at once, a few million floats each
  mat, pair = jax.lax.map(lambda a: one(*a), (zf, wf), batch_size=batch)
  mat = mat.reshape(lead + (size, size))
  pair = None if pair is None else pair.reshape(lead + (size * size, size * size))
  return mat, pair, jnp.zeros(lead + (size,))


def _sampled_marginals(key, z, where, k, pairs, num_samples, chunk=100):
  """Item-position matrix (and pairs) as means over ``num_samples`` Gumbel-max rankings, with standard errors."""
  size = z.shape[-1]
  rounds = -(-int(num_samples) // chunk)
  n = rounds * chunk

  def draw(kk):
    g = jax.random.gumbel(kk, (chunk,) + z.shape)
    ranks = rax.utils.ranks(jnp.where(where, z, 0.0) + g, where=jnp.broadcast_to(where, g.shape)) - 1
    onehot = jax.nn.one_hot(ranks, size) * (where & (ranks < k))[..., None]
    flat = onehot.reshape(onehot.shape[:-2] + (size * size,))
    pair = jnp.einsum("n...i,n...j->...ij", flat, flat) if pairs else None
    return jnp.sum(onehot, axis=0), pair

  def body(carry, kk):
    mat, pair = draw(kk)
    return (carry[0] + mat, None if pair is None else carry[1] + pair), None

  init = (jnp.zeros(z.shape + (size,)), jnp.zeros(z.shape[:-1] + (size * size,) * 2) if pairs else None)
  (mat, pair), _ = jax.lax.scan(body, init, jax.random.split(key, rounds))
  mat = mat / n
  diag = jnp.diagonal(mat, axis1=-2, axis2=-1)
  stderr = jnp.sqrt(diag * (1.0 - diag) / n)
  return mat, None if pair is None else pair / n, stderr


def plackett_luce_propensities(
  scores: Array,
  *,
  where: Optional[Array] = None,
  temperature: float = 1.0,
  top_k: Optional[int] = None,
  matrix: bool = False,
  pairs: bool = False,
  key: Optional[PRNGKey] = None,
  num_samples: int = 10_000,
  max_enumeration: int = 5040,
) -> Propensities:
  r"""A policy's probabilities of the logged rankings (deterministic or Plackett-Luce).

  For the logged display :math:`a` (item :math:`j` at position :math:`j`) and :math:`z = s / \tau`:

  .. math::
      \pi(a_{1:l}) = \prod_{t \le l} \frac{e^{z_{a_t}}}{\sum_{u \ge t} e^{z_{a_u}}}, \qquad
      \pi(y_l = a_l) = \sum_{y:\, y_l = a_l} \pi(y)

  (the Plackett-Luce prefix probability, exact; the item-position marginal by enumeration of the
  :math:`L!/(L-K)!` prefixes when that is at most ``max_enumeration``, else the mean of
  :math:`\mathbb{1}[y_l = a_l]` over ``num_samples`` Gumbel-max samples with standard error
  :math:`\sqrt{p(1-p)/N}`). The propensities McInerney et al. (KDD'20, Eqs. 1-4) and Swaminathan et al.
  (NeurIPS'17, Eq. 3's :math:`\Gamma_\mu`) weight by. ``temperature=0`` is the deterministic ranking by
  ``scores`` (probabilities 0 or 1).

  Args:
    scores: ``[..., L]`` the policy's scores of the logged items in display order.
    where: ``bool[..., L]`` (valid items first).
    temperature: :math:`\tau \ge 0`, a Python float (0: deterministic).
    top_k: the displayed prefix :math:`K` (None: all ``L``).
    matrix: also return the item-position matrix ``[..., L, L]``.
    pairs: also return the pairwise item-position matrix ``[..., L*L, L*L]``.
    key: PRNG key, needed when the marginals are sampled.
    num_samples: samples for the sampled marginals (rounded up to a multiple of 100).
    max_enumeration: enumerate the prefixes when there are at most this many.

  Returns:
    :class:`Propensities`.

  >>> p = plackett_luce_propensities(jnp.zeros(3), temperature=1.0)
  >>> print(np.asarray(p.prefix).round(4), np.asarray(p.item_position).round(4))
  [0.3333 0.1667 0.1667] [0.3333 0.3333 0.3333]
  """
  z = jnp.asarray(scores, jnp.float32)
  where = _mask(z, where)
  size = z.shape[-1]
  k = _cut(size, top_k)
  C.check_options(temperature=temperature, top_k=top_k, what="plackett_luce_propensities")
  if temperature == 0:
    return _deterministic(z, where, k, matrix, pairs)
  prefix = prefix_probs(z, where, temperature)
  z = jnp.where(where, z / temperature, 0.0)
  if num_prefixes(size, k) <= max_enumeration:
    mat, pair, stderr = _enumerated_marginals(z, where, k, pairs)
  else:
    if key is None:
      raise ValueError(
        f"plackett_luce_propensities: {num_prefixes(size, k)} prefixes exceed max_enumeration={max_enumeration}; "
        "pass key= to sample the item-position marginals"
      )
    mat, pair, stderr = _sampled_marginals(key, z, where, k, pairs, num_samples)
  diag = jnp.diagonal(mat, axis1=-2, axis2=-1)
  item_position = jnp.where(where & (jnp.arange(size) < k), diag, 1.0)
  return Propensities(
    ranking=prefix[..., k - 1],
    prefix=prefix,
    item_position=item_position,
    item_position_stderr=jnp.where(where, stderr, 0.0),
    matrix=mat if matrix else None,
    pairs=pair,
  )
