"""A resumed run is the same run (every byte of its data, its stream's identity); a corrupted newest checkpoint
is reported and skipped; one run holds a workdir at a time; a NaN under the mask never reaches the loss, and a
divergence names its step, batch and cause."""

import dataclasses
import glob
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from ultr_jax.data import RankingDataset
from ultr_jax.train import default_train_config, fit, get_method, run_fingerprint, run_in_progress, write_results
from ultr_jax import _workdir as workdir_lock
from ultr_jax._checkpoint import Checkpointer, restore_checkpoint
from ultr_jax.train.input import mask_padding

L, F = 4, 3


def _lists(num_queries=80, seed=0) -> RankingDataset:
  """Lists of 2..4 items (padding zero), logged clicks (labels >= 2)."""
  rng = np.random.default_rng(seed)
  where = np.arange(L)[None] < rng.integers(2, L + 1, size=num_queries)[:, None]
  features = np.where(where[..., None], rng.normal(size=(num_queries, L, F)), 0.0).astype(np.float32)
  labels = np.where(where, rng.integers(0, 4, size=(num_queries, L)), 0).astype(np.float32)
  ds = RankingDataset(features=features, labels=labels, where=where, qid=np.arange(1000, 1000 + num_queries))
  return ds.with_extras(clicks=(labels >= 2).astype(np.float32))


TRAIN, VALID = _lists(), _lists(8, seed=1)


def _config(**kw):
  c = default_train_config()
  c.steps, c.batch_size, c.eval_every, c.progress, c.learning_rate, c.num_devices = 8, 8, 4, False, 0.05, 1
  c.update(kw)
  return c


def _method():
  return get_method("naive", {"ranker": "mlp", "hidden_sizes": [4]}, num_features=F, list_size=L)


def _fit(train=TRAIN, workdir=None, seeds=(0,), **kw):
  return fit(_method(), train, VALID, config=_config(**kw), seeds=seeds, workdir=workdir and str(workdir))


def _same(a, b):
  for x, y in zip(jax.tree.leaves(a.final_params), jax.tree.leaves(b.final_params)):
    np.testing.assert_array_equal(x, y)
  assert a.history == b.history


class _Stream:
  """The in-memory batches of seed 0 (queries ``8 s .. 8 s + 7``), with an ``identity()`` and a position."""

  def __init__(self, train=TRAIN, identity="conversion-a"):
    self.train, self.ident, self.pos = train, identity, 0

  def __iter__(self):
    return self

  def __next__(self):
    idx = (np.arange(8) + 8 * self.pos) % self.train.num_queries
    self.pos += 1
    return {k: v for k, v in self.train.as_batch(idx).items() if k != "qid"}

  def identity(self):
    return self.ident

  def get_state(self):
    return {"pos": self.pos}

  def set_state(self, state):
    self.pos = int(state["pos"])


# ----------------------------------------------------------------------------
# Identity in every resume.


def _swap_labels(ds):  # two documents' labels swapped in query 1 (the sums stay; the old digest sampled query 0, 2)
  labels = ds.labels.copy()
  labels[1, [0, 1]] = labels[1, [1, 0]] if labels[1, 0] != labels[1, 1] else (labels[1, 0] + 1, labels[1, 1])
  return dataclasses.replace(ds, labels=labels)


def _one_feature(ds):  # one feature of two documents of query 1 swapped (the sums stay)
  features = ds.features.copy()
  features[1, [0, 1], 2] = features[1, [1, 0], 2]
  return dataclasses.replace(ds, features=features)


def _one_click(ds):  # the clicks of query 1 rolled by one (their sum stays)
  clicks = ds.extras["clicks"].copy()
  clicks[1] = np.roll(clicks[1], 1) if len(set(clicks[1].tolist())) > 1 else 1.0 - clicks[1]
  return ds.with_extras(clicks=clicks)


@pytest.mark.parametrize("change", [_swap_labels, _one_feature, _one_click])
def test_any_change_of_the_training_data_changes_the_fingerprint(change):
  train = _lists(200)  # more than the 64 queries the old digest sampled
  base = run_fingerprint(_method(), train, VALID)
  changed = run_fingerprint(_method(), change(train), VALID)
  assert "train_data" in [k.split(".")[0] for k in _diff(base, changed)]
  assert base["hash"] != changed["hash"]
  assert run_fingerprint(_method(), train, VALID)["hash"] == base["hash"]


def _diff(a, b):
  from ultr_jax.train import fingerprint_diff  # noqa: PLC0415

  return fingerprint_diff(a, b)


def test_a_rerun_on_other_data_in_the_same_workdir_is_refused(tmp_path):
  _fit(workdir=tmp_path, steps=4)
  with pytest.raises(ValueError, match=r"different run: train_data"):
    _fit(_swap_labels(TRAIN), workdir=tmp_path)


@pytest.mark.parametrize(
  "other",
  [
    lambda: _Stream(identity="conversion-b"),  # the same first batch, another identity (other shards, options)
    lambda: _Stream(train=_one_feature(TRAIN)),  # the same identity, another first batch
  ],
  ids=["identity", "first_batch"],
)
def test_a_stream_resumes_only_its_own_run(tmp_path, other):
  full = _fit(_Stream(), steps=8)
  _fit(_Stream(), workdir=tmp_path, steps=4)
  with pytest.raises(ValueError, match=r"different run: train_data"):
    _fit(other(), workdir=tmp_path, steps=8)
  _same(_fit(_Stream(), workdir=tmp_path, steps=8), full)  # its own stream resumes where it stopped


# ----------------------------------------------------------------------------
# Corrupted checkpoints.


def _empty(pattern):
  def corrupt(step_dir):
    files = [f for f in glob.glob(os.path.join(step_dir, pattern), recursive=True) if os.path.isfile(f)]
    assert files, pattern
    for f in files:
      open(f, "w").close()

  return corrupt


CORRUPTIONS = {
  "meta": _empty("meta/metadata"),
  "state_metadata": _empty("state/_METADATA"),
  "state_data": _empty("state/manifest.ocdbt"),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupted_newest_step_falls_back_or_stops(tmp_path, corruption):
  ckpt = Checkpointer(str(tmp_path / "ckpt"), max_to_keep=3)
  for step in (1, 2):
    ckpt.save(step, {"w": np.full(3, float(step), np.float32)}, {"fingerprint": {"hash": "x"}})
  ckpt.close()
  CORRUPTIONS[corruption](str(tmp_path / "ckpt" / "2"))
  like = {"w": np.zeros(3, np.float32)}
  ckpt = Checkpointer(str(tmp_path / "ckpt"), max_to_keep=3)
  with pytest.raises(ValueError, match=r"step 2 \(.*ckpt/2\) is unreadable.*restart=True"):
    restore_checkpoint(ckpt, like, {"hash": "x"}, max_step=9, on_corrupt="raise")
  ckpt = Checkpointer(str(tmp_path / "ckpt"), max_to_keep=3)
  warnings = []
  step, state, _ = restore_checkpoint(ckpt, like, {"hash": "x"}, max_step=9, warn=warnings.append)
  assert step == 1 and state["w"].tolist() == [1.0] * 3
  assert len(warnings) == 1 and "ckpt/2" in warnings[0] and "restart=True" in warnings[0]
  assert os.path.isdir(tmp_path / "ckpt.corrupt" / "2") and ckpt.all_steps() == [1]
  ckpt.save(2, state, {"fingerprint": {"hash": "x"}})  # the step can be written again
  ckpt.close()


def test_a_checkpoint_keeps_the_meta_of_its_step(tmp_path):
  # Orbax writes in a background thread: a history appended to after the save is not this step's.
  for i in range(3):
    ckpt = Checkpointer(str(tmp_path / f"ckpt{i}"))
    meta = {"history": [{"step": 1}]}
    ckpt.save(1, {"w": np.zeros(3, np.float32)}, meta)
    meta["history"].append({"step": 2})
    ckpt.wait()
    assert ckpt.restore_meta(1)["history"] == [{"step": 1}]
    ckpt.close()


def test_fit_resumes_from_the_newest_readable_step(tmp_path):
  full = _fit(steps=8)
  _fit(workdir=tmp_path, steps=8, eval_every=4, max_to_keep=3)
  CORRUPTIONS["meta"](str(tmp_path / "checkpoints" / "naive" / "8"))
  with pytest.raises(ValueError, match=r"checkpoints/naive/8\) is unreadable: JSONDecodeError.*restart=True"):
    _fit(workdir=tmp_path, steps=8, on_corrupt_checkpoint="raise")
  _same(_fit(workdir=tmp_path, steps=8), full)  # resumed at step 4, retrained to 8


# ----------------------------------------------------------------------------
# One run per workdir.


@pytest.fixture
def live_holder(tmp_path):
  """A workdir whose lock a live process (``sleep``) on this host holds."""
  proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  (tmp_path / "IN_PROGRESS").write_text(f"pid {proc.pid}\nhost {socket.gethostname()}\nstarted x\ncommand y\n")
  (tmp_path / "results.json").write_text("{}")
  yield tmp_path, proc.pid
  proc.kill()
  proc.wait()


ENTRY_POINTS = {
  "run_in_progress": lambda w: run_in_progress(str(w)).__enter__(),
  "fit": lambda w: _fit(workdir=w, steps=4),
  "write_results": lambda w: write_results(str(w), {"a": 1}),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_second_run_respects_the_lock(live_holder, entry):
  workdir, pid = live_holder
  with pytest.raises(workdir_lock.WorkdirLockedError, match=rf"{workdir}.*pid {pid} on host {socket.gethostname()}"):
    ENTRY_POINTS[entry](workdir)
  assert (workdir / "results.json").read_text() == "{}" and not (workdir / "stale").exists()  # nothing touched
  assert f"pid {pid}" in (workdir / "IN_PROGRESS").read_text()


@pytest.mark.parametrize("marker", ["dead_pid", "failed", "old_format"])
def test_a_stale_lock_is_taken_over(tmp_path, marker):
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  proc.wait()  # its pid is no longer alive
  text = {
    "dead_pid": f"pid {proc.pid}\nhost {socket.gethostname()}\n",
    "failed": f"pid {os.getppid()}\nhost {socket.gethostname()}\nfailed: ValueError: x\n",
    "old_format": f"started 2026-01-01T00:00:00+00:00 (pid {proc.pid}): main.py\n",
  }[marker]
  (tmp_path / "IN_PROGRESS").write_text(text)
  with run_in_progress(str(tmp_path)):
    assert f"pid {os.getpid()}" in (tmp_path / "IN_PROGRESS").read_text()
    write_results(str(tmp_path), {"a": 1})
  assert not (tmp_path / "IN_PROGRESS").exists() and (tmp_path / "results.json").exists()


def test_the_lock_is_exclusive_between_processes(tmp_path):
  code = (
    "import sys, time; from ultr_jax import _workdir as w; w.acquire(sys.argv[1]); print('held', flush=True); "
    "time.sleep(60)"
  )
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
  proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
  try:
    assert proc.stdout.readline().strip() == "held"
    with pytest.raises(workdir_lock.WorkdirLockedError, match=f"pid {proc.pid}"):
      workdir_lock.acquire(str(tmp_path))
  finally:
    proc.kill()
    proc.wait()
  assert workdir_lock.acquire(str(tmp_path))  # its process is gone: stale, taken over
  workdir_lock.release(str(tmp_path))


# ----------------------------------------------------------------------------
# NaN under the mask; divergence reports.


def _with_nan(ds, *, shown):
  """A NaN in one feature of query 5: of a shown item, or of a padded one (``where`` False)."""
  q = 5
  item = 0 if shown else int(np.flatnonzero(~ds.where[q])[0])
  features = ds.features.copy()
  features[q, item, 1] = np.nan
  return dataclasses.replace(ds, features=features)


TRAIN_PADDED = _lists()
assert (~TRAIN_PADDED.where[5]).any()


def test_mask_padding_zeroes_only_masked_float_entries():
  batch = {
    "features": np.array([[[1.0, np.nan], [np.inf, 2.0]]], np.float32),
    "clicks": np.array([[np.nan, 1.0]], np.float32),
    "positions": np.array([[0, 7]], np.int32),
    "where": np.array([[False, True]]),
  }
  out = jax.device_get(mask_padding(batch))
  np.testing.assert_array_equal(out["features"], [[[0.0, 0.0], [np.inf, 2.0]]])
  np.testing.assert_array_equal(out["clicks"], [[0.0, 1.0]])
  np.testing.assert_array_equal(out["positions"], [[0, 7]])


@pytest.mark.parametrize("source", ["memory", "stream"])
def test_a_nan_under_the_mask_changes_nothing(source):
  make = (lambda ds: ds) if source == "memory" else _Stream
  clean = _fit(make(TRAIN_PADDED), seeds=(0,))
  _same(_fit(make(_with_nan(TRAIN_PADDED, shown=False)), seeds=(0,)), clean)


@pytest.mark.parametrize("source", ["memory", "stream"])
def test_a_nan_in_a_shown_feature_is_reported_with_its_step_batch_and_field(source):
  train = _with_nan(TRAIN_PADDED, shown=True)
  # Query 5 is in the first batch of the stream (queries 0..7); in memory, the batch the permutation puts it in.
  with pytest.raises(FloatingPointError, match=r"diverged at step 10") as err:
    _fit(train if source == "memory" else _Stream(train), steps=10, eval_every=10)  # 10 batches: every query
  message = str(err.value)
  assert "input features hold(s) non-finite values" in message and "Lower the learning rate" not in message
  if source == "stream":
    assert "came at step 1 (batch 0)" in message
  else:
    assert "qid [1005]" in message


def test_a_divergence_of_the_parameters_names_the_step_and_the_parameters():
  match = r"came at step \d+ \(batch \d+\), with finite inputs and parameters: the update made .*Lower the learning"
  with pytest.raises(FloatingPointError, match=match):
    _fit(TRAIN, learning_rate=1e30)
