"""The reader of a stream of training batches for :func:`~ultr_jax.train.fit`."""

import jax
import numpy as np

from ultr_jax.train import sharding as sharding_lib
from ultr_jax.train.fingerprint import canonical

__all__ = ["StreamReader"]


def _aligned_empty(shape: tuple, dtype, align: int = 64) -> np.ndarray:
  """An uninitialised host array whose data starts on an ``align``-byte boundary.

  XLA's CPU client aliases such an array in ``jax.device_put`` instead of copying it (measured in
  benchmarks/RESULTS.md, "`fit` on a stream, after removing host work"); elsewhere the alignment is harmless.
  """
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  raw = np.empty(nbytes + align, np.uint8)
  start = -raw.ctypes.data % align
  return raw[start : start + nbytes].view(dtype).reshape(shape)


def _narrow(dtype: np.dtype) -> np.dtype:
  """The dtype a host array takes on the devices without x64: float64 -> float32, int64 -> int32."""
  if dtype == np.float64:
    return np.dtype(np.float32)
  if dtype == np.int64:
    return np.dtype(np.int32)
  return dtype


class StreamReader:
  """Reads a stream of batches for :func:`fit`: copies ``steps_per_call`` batches into a chunk, puts it on the
  devices (sharded over the batch axis; ``jax.device_put`` is asynchronous) up to ``prefetch`` chunks ahead,
  and tracks the stream's position (``get_state()``) after the last batch trained on, for checkpoints.

  The chunks' host buffers are allocated once and reused: a buffer goes back to the pool when the call that
  trained on it has finished (its outputs are ready), so no step pays for fresh memory (filling fresh pages
  costs far more than refilling used ones; see benchmarks/RESULTS.md). The batches are cast
  (float64 -> float32, int64 -> int32) while they are copied in, not before.
  """

  def __init__(self, source, mesh):
    self.it = iter(source)
    self.stateful = next(
      (
        o
        for o in (source, self.it)
        if callable(getattr(o, "get_state", None)) and callable(getattr(o, "set_state", None))
      ),
      None,
    )
    self.mesh = mesh
    self.sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, sharding_lib.DATA_AXIS))
    self.pending: list = []
    self.consumed_state = self._state()
    self.queue: list = []
    self.last = None
    self.spec: dict = {}  # {name: (shape, dtype)} of a batch, from the first one
    self.pulled = 0
    self.free: list = []  # host buffers {name: [K, B, ...]} no computation reads any more
    self.busy: list = []  # (buffer, outputs of the call that reads it)
    self.handed = None  # the buffer of the chunk next_chunk handed out last
    self.num_buffers = 0

  def _state(self):
    return canonical(self.stateful.get_state()) if self.stateful is not None else None

  def _pull(self):
    if self.pending:
      return self.pending.pop(0)
    try:
      b = next(self.it)
    except StopIteration:
      return None
    b = {k: np.asarray(v) for k, v in b.items()}
    spec = {k: (v.shape, _narrow(v.dtype)) for k, v in b.items()}
    if not self.spec:  # the first batch
      if b["where"].shape[0] * jax.process_count() % self.mesh.size:
        raise ValueError(
          f"a streamed batch of {b['where'].shape[0]} lists does not split over {self.mesh.size} devices"
        )
      self.spec = spec
    elif spec != self.spec:
      differ = sorted(k for k in set(spec) | set(self.spec) if spec.get(k) != self.spec.get(k))
      show = lambda sp: {k: f"{sp[k][1].name}{list(sp[k][0])}" if k in sp else None for k in differ}  # noqa: E731
      raise ValueError(
        f"fit: streamed batch {self.pulled} differs from the first in {differ}: {show(spec)}, where the first "
        f"has {show(self.spec)} (every batch must have the same keys, shapes and dtypes)"
      )
    self.pulled += 1
    return b, self._state()

  def peek(self) -> dict:
    item = self._pull()
    if item is None:
      raise ValueError("fit: the training stream is empty")
    self.pending.insert(0, item)
    return item[0]

  def _device(self, host: dict) -> dict:
    out = {}
    for k, v in host.items():
      if jax.process_count() > 1:
        shape = (v.shape[0], v.shape[1] * jax.process_count()) + v.shape[2:]
        out[k] = jax.make_array_from_process_local_data(self.sharding, v, shape)
      else:
        out[k] = jax.device_put(v, self.sharding)
    return out

  def put_one(self, batch: dict) -> dict:
    """``{name: [1, B, ...]}`` on the devices (a fresh buffer: for the initial state)."""
    return self._device({k: np.asarray(v, self.spec[k][1])[None] for k, v in batch.items()})

  def _buffer(self) -> dict:
    """A host buffer for a chunk: a released one, a new one, or (at the limit) the oldest once it is released."""
    done = [i for i, (_, outputs) in enumerate(self.busy) if all(x.is_ready() for x in jax.tree.leaves(outputs))]
    for i in reversed(done):
      self.free.append(self.busy.pop(i)[0])
    if self.free:
      return self.free.pop()
    if self.busy and self.num_buffers >= self.prefetch + 2:
      buf, outputs = self.busy.pop(0)
      jax.block_until_ready(outputs)
      return buf
    self.num_buffers += 1
    return {k: _aligned_empty((self.per_call,) + shape, dtype) for k, (shape, dtype) in self.spec.items()}

  def resume(self, step: int, saved_state) -> None:
    """Positions the stream after ``step`` batches: ``set_state(saved_state)``, or skipping ``step`` batches."""
    if self.stateful is not None and saved_state is not None:
      self.pending = []
      self.stateful.set_state(saved_state)
      self.consumed_state = saved_state
      return
    for _ in range(step):
      if self._pull() is None:
        break
    self.consumed_state = self._state()

  def start(self, step: int, total: int, per_call: int, prefetch: int) -> None:
    self.plan, self.total, self.per_call, self.prefetch, self.ended = step, total, per_call, prefetch, False
    self.refill()

  def refill(self, after=None) -> None:
    """Reads chunks up to ``prefetch`` ahead; ``after``: the outputs of the call given the last chunk handed out
    (its buffer is reused once they are ready)."""
    if after is not None and self.handed is not None:
      self.busy.append((self.handed, after))
      self.handed = None
    while len(self.queue) < self.prefetch and self.plan < self.total and not self.ended:
      n = min(self.per_call - self.plan % self.per_call, self.total - self.plan)
      buf, got, state = None, 0, None
      while got < n:
        item = self._pull()
        if item is None:
          self.ended = True
          break
        if buf is None:
          buf = self._buffer()
        for k, v in item[0].items():
          buf[k][got] = v
        got, state = got + 1, item[1]
      if not got or buf is None:
        if buf is not None:
          self.free.append(buf)
        break
      for k in buf:  # the rest of the chunk repeats the last batch (those steps are not live)
        buf[k][got:] = buf[k][got - 1]
      self.queue.append((self._device(buf), got, state, buf))
      self.plan += got

  def next_chunk(self):
    """``(chunk, batches in it)``; ``(the last chunk, 0)`` once the stream has ended."""
    if not self.queue:
      self.refill()
    if not self.queue:
      return self.last, 0
    chunk, n, state, self.handed = self.queue.pop(0)
    self.last, self.consumed_state = chunk, state
    return chunk, n

  def close(self) -> None:
    self.queue, self.free, self.busy, self.handed = [], [], [], None
