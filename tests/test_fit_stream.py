"""``fit`` on a stream of logged-click batches: the same training as in memory, resumable mid-stream."""

import jax
import numpy as np
import pytest

from ultr_jax import data
from ultr_jax.train import default_train_config, fit, get_method
from ultr_jax.train.input import _batch_indices
from conftest import assert_same_fit as _assert_same
from conftest import fit_leaves as _leaves

B = 8


def _train():
  splits = data.make_synthetic(num_train=40, num_valid=12, num_test=4, list_size=6, num_features=5, seed=11)
  return splits.train.with_extras(clicks=(splits.train.labels >= 2).astype(np.float32)), splits.valid


def _config(**kw):
  c = default_train_config()
  c.steps, c.batch_size, c.eval_every, c.progress, c.learning_rate, c.num_devices = 30, B, 10, False, 0.05, 1
  for k, v in kw.items():
    c[k] = v
  return c


def _method():
  return get_method("dla", {"ranker": "mlp", "hidden_sizes": [8]}, num_features=5, list_size=6)


class _Stream:
  """The batches the in-memory path draws for seed 0, with ``get_state`` / ``set_state`` (its position)."""

  def __init__(self, train, limit=None):
    self.train, self.pos, self.limit, self.pulled = train, 0, limit, 0

  def __iter__(self):
    return self

  def __next__(self):
    if self.limit is not None and self.pos >= self.limit:
      raise StopIteration
    idx = _batch_indices(self.train.num_queries, B, self.pos, [0], 0)[0]
    self.pos += 1
    self.pulled += 1
    return self.train.as_batch(idx)

  def get_state(self):
    return {"pos": self.pos}

  def set_state(self, state):
    self.pos = int(state["pos"])


def _generator(train):
  """The same batches from a plain generator (no state): resuming skips the batches already trained on."""
  step = 0
  while True:
    yield train.as_batch(_batch_indices(train.num_queries, B, step, [0], 0)[0])
    step += 1


@pytest.mark.parametrize("steps_per_call", [100, 2])
def test_a_stream_of_the_in_memory_batches_trains_the_same(steps_per_call):
  """With 2 steps per call, 15 chunks pass through the reader's 4 host buffers: each is reused, and must not be
  refilled before the call that trains on it has read it."""
  train, valid = _train()
  memory = fit(_method(), train, valid, config=_config(steps_per_call=steps_per_call))
  stream = _Stream(train)
  streamed = fit(_method(), stream, valid, config=_config(steps_per_call=steps_per_call))
  _assert_same(memory, streamed)
  assert stream.pulled <= 30 + 1  # one batch per step (plus at most the peeked one, which is kept)
  _assert_same(memory, fit(_method(), _generator(train), valid, config=_config(steps_per_call=steps_per_call)))


def test_a_batch_unlike_the_first_is_an_error():
  train, valid = _train()
  batches = [train.as_batch(np.arange(B)) for _ in range(3)] + [train.as_batch(np.arange(B // 2))]
  with pytest.raises(
    ValueError, match=r"streamed batch 3 differs .*'features': 'float32\[4, 6, 5\]'.*'features': 'float32\[8, 6, 5\]'"
  ):
    fit(_method(), iter(batches), valid, config=_config(steps=4, eval_every=4))


@pytest.mark.parametrize("stateful", [True, False])
def test_resuming_mid_stream_equals_the_uninterrupted_run(tmp_path, stateful):
  train, valid = _train()
  make = (lambda: _Stream(train)) if stateful else (lambda: _generator(train))
  full = fit(_method(), make(), valid, config=_config())
  fit(_method(), make(), valid, config=_config(steps=20), workdir=str(tmp_path))
  resumed_stream = make()
  resumed = fit(_method(), resumed_stream, valid, config=_config(), workdir=str(tmp_path))
  assert [h["step"] for h in resumed.history] == [10, 20, 30]  # 10 and 20 restored from the checkpoint
  _assert_same(full, resumed)
  if stateful:
    assert resumed_stream.pulled <= 10 + 1  # set_state: the first 20 batches are not read again


def test_the_run_stops_where_the_stream_ends():
  train, valid = _train()
  r = fit(_method(), _Stream(train, limit=25), valid, config=_config())
  assert [h["step"] for h in r.history] == [10, 20, 25]
  _assert_same(r, fit(_method(), train, valid, config=_config(steps=25)))


def test_a_stream_on_eight_devices_trains_as_on_one():
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
  train, valid = _train()
  one = fit(_method(), _Stream(train), valid, config=_config())
  eight = fit(_method(), _Stream(train), valid, config=_config(num_devices=8))
  for x, y in zip(_leaves(one), _leaves(eight)):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
