"""Counting integer codes on the JAX default device: a sort-based reduction (see ``statistics.count_codes``)."""

import jax
import jax.numpy as jnp
import numpy as np

_LOW_BITS = 31


def _padded_size(n: int) -> int:
  """The next power of two (at least 1024): one compiled program per size class."""
  return max(1024, 1 << (int(n) - 1).bit_length())


@jax.jit
def _reduce(hi: jax.Array, lo: jax.Array, num_valid: jax.Array):
  """Sorted distinct ``(hi, lo)`` pairs of the first ``num_valid`` entries (padding sorts last), their counts,
  and how many there are."""
  n = hi.shape[0]
  hi, lo = jax.lax.sort((hi, lo), num_keys=2)
  change = jnp.concatenate([jnp.ones(1, bool), (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])])
  segment = jnp.cumsum(change.astype(jnp.int32)) - 1
  valid = jnp.arange(n) < num_valid
  counts = jax.ops.segment_sum(valid.astype(jnp.int32), segment, num_segments=n)
  uniq_hi = jnp.zeros(n, jnp.int32).at[segment].set(hi)
  uniq_lo = jnp.zeros(n, jnp.int32).at[segment].set(lo)
  num = jnp.where(num_valid > 0, segment[jnp.maximum(num_valid - 1, 0)] + 1, 0)
  return uniq_hi, uniq_lo, counts, num


def count_codes_on_device(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """``(distinct codes int64[U], counts int64[U])`` of ``int[N]`` codes in ``[0, 2^62)``, reduced on the device."""
  code = np.asarray(code, np.int64)
  n = code.shape[0]
  size = _padded_size(n)
  hi = np.full(size, np.iinfo(np.int32).max, np.int32)  # padding: above every code's high word
  lo = np.full(size, np.iinfo(np.int32).max, np.int32)
  hi[:n] = code >> _LOW_BITS
  lo[:n] = code & ((1 << _LOW_BITS) - 1)
  uniq_hi, uniq_lo, counts, num = _reduce(jnp.asarray(hi), jnp.asarray(lo), jnp.int32(n))
  num = int(num)
  uniq = (np.asarray(uniq_hi[:num]).astype(np.int64) << _LOW_BITS) | np.asarray(uniq_lo[:num]).astype(np.int64)
  return uniq, np.asarray(counts[:num]).astype(np.int64)
