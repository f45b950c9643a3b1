"""The Minibatch click-model solver's checkpoints, resume and divergence checks (through ultr_jax._checkpoint and
ultr_jax._divergence, shared with the training loop)."""

import os

import flax.linen as nn
import numpy as np
import optax
import pytest

from ultr_jax.simulation import FeatureTable, HashedTable, Minibatch, evaluate_click_model_stream, fit_click_model

NUM_DOCS = 30


def _log(num_batches: int = 10, seed: int = 0) -> list:
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(num_batches):
    ids = np.stack([rng.choice(NUM_DOCS, 4, replace=False) for _ in range(16)])
    out.append({"doc_ids": ids, "clicks": (rng.random((16, 4)) < 0.3).astype(np.float32)})
  return out


LOG = _log()
SETTINGS = dict(optimizer=optax.adam(0.05), epochs=3, sparse=True, steps_per_call=3)


class _Interrupted(Exception):
  pass


class _Flaky:
  """A function returning fresh batches of ``LOG`` that raises at the ``stop``-th batch it reads in all (the
  counting pass and the fingerprint's first batch included)."""

  def __init__(self, stop: int, log=LOG):
    self.stop, self.read, self.log = stop, 0, log

  def __call__(self):
    for batch in self.log:
      self.read += 1
      if self.read == self.stop:
        raise _Interrupted(f"batch {self.read}")
      yield batch


def _fit(data=LOG, model="dbn", l2=1.0, **settings):
  return fit_click_model(model, data, solver=Minibatch(**{**SETTINGS, **settings}), num_docs=NUM_DOCS, l2=l2)


def _same(a, b):
  assert a.iterations == b.iterations
  assert a.log_likelihood == b.log_likelihood
  assert sorted(a.logits) == sorted(b.logits)
  for k in a.logits:
    np.testing.assert_array_equal(np.asarray(a.logits[k]), np.asarray(b.logits[k]), err_msg=k)


def test_a_fit_resumed_mid_epoch_equals_the_fit_without_interruption(tmp_path):
  reference = _fit()
  # The counting pass reads 10 batches, the fingerprint 1, the first epoch 10: the fit stops at the 5th batch of
  # its second epoch, with checkpoints after each call (3 batches) of the steps done so far.
  flaky = _Flaky(stop=10 + 1 + 10 + 5)
  with pytest.raises(_Interrupted):
    _fit(flaky, checkpoint_dir=str(tmp_path), checkpoint_every=1)
  assert sorted(int(s) for s in os.listdir(tmp_path)) == [10, 13]  # mid-epoch: 10 batches, then 3 more
  resumed = _fit(checkpoint_dir=str(tmp_path), checkpoint_every=1)
  _same(resumed, reference)
  assert resumed.iterations == 30
  # The finished fit's last checkpoint: a third fit takes no step and returns the same.
  assert max(int(s) for s in os.listdir(tmp_path)) == 30
  _same(_fit(checkpoint_dir=str(tmp_path)), reference)


def test_a_fit_without_checkpoint_dir_writes_nothing_and_matches_one_with(tmp_path):
  _same(_fit(checkpoint_dir=str(tmp_path / "c"), checkpoint_every=2), _fit())


@pytest.mark.parametrize(
  "change, key",
  [
    (dict(l2=0.5), "l2"),
    (dict(model="ubm"), "model.name"),
    (dict(optimizer=optax.adam(0.1)), "optimizer"),
    (dict(epochs=2), "solver.epochs"),
    (dict(tables={"attraction": HashedTable(16)}), "solver.tables"),
    (dict(data=LOG[:9]), "data.num_sessions"),
    (dict(data=_log(seed=1)), "data.first_batch"),
  ],
)
def test_another_fits_checkpoint_is_refused_naming_what_differs(tmp_path, change, key):
  _fit(epochs=1, checkpoint_dir=str(tmp_path))
  with pytest.raises(ValueError, match=rf"different run: .*{key}.*Use another checkpoint_dir"):
    _fit(**{"epochs": 1, **change, "checkpoint_dir": str(tmp_path)})


def test_a_corrupt_newest_checkpoint_is_set_aside_and_the_fit_resumes_from_the_previous(tmp_path):
  reference = _fit()
  with pytest.raises(_Interrupted):
    _fit(_Flaky(stop=10 + 1 + 10 + 8), checkpoint_dir=str(tmp_path), checkpoint_every=1)
  assert sorted(int(s) for s in os.listdir(tmp_path)) == [13, 16]
  open(os.path.join(tmp_path, "16", "meta", "metadata"), "w").close()  # the newest step's meta, emptied
  _same(_fit(checkpoint_dir=str(tmp_path), checkpoint_every=1), reference)
  assert os.listdir(str(tmp_path) + ".corrupt") == ["16"]


def test_a_grid_of_l2_values_checkpoints_each_in_its_own_directory(tmp_path):
  solver = Minibatch(**{**SETTINGS, "epochs": 1}, checkpoint_dir=str(tmp_path))
  fit = fit_click_model("pbm", LOG, solver=solver, num_docs=NUM_DOCS, l2=[1.0, 0.5], validation=LOG[:2])
  assert sorted(os.listdir(tmp_path)) == ["l2=0.5", "l2=1.0"]
  again = fit_click_model("pbm", LOG, solver=solver, num_docs=NUM_DOCS, l2=[1.0, 0.5], validation=LOG[:2])
  _same(again, fit)


def test_a_nan_click_is_refused_naming_its_batch_and_clicks():
  data = [dict(b) for b in LOG]
  data[3]["clicks"] = data[3]["clicks"].copy()
  data[3]["clicks"][2, 1] = np.nan
  with pytest.raises(ValueError, match=r"Minibatch: batch 3 .*clicks must be 0 or 1.*clicks\[2, 1\] = nan"):
    _fit(data)


def test_a_nan_feature_stops_the_fit_naming_its_batch_and_features():
  features = np.random.default_rng(0).normal(size=(NUM_DOCS + 1, 2)).astype(np.float32)
  features[NUM_DOCS, 1] = np.nan  # document 30's, first shown in batch 4
  data = [dict(b) for b in LOG]
  data[4]["doc_ids"] = data[4]["doc_ids"].copy()
  data[4]["doc_ids"][0, 0] = NUM_DOCS
  solver = Minibatch(**{**SETTINGS, "epochs": 1}, tables={"attraction": FeatureTable(nn.Dense(1), features)})
  with pytest.raises(FloatingPointError, match=r"diverged at batch 4 .*epoch 0.*input features hold"):
    fit_click_model("dbn", data, solver=solver, num_docs=NUM_DOCS + 1)


def test_a_learning_rate_that_blows_up_stops_the_fit_naming_the_batch_and_parameters():
  with pytest.raises(
    FloatingPointError, match=r"diverged at batch 1 .*update made parameter\(s\) .*\['rows'\]\['attraction'\]"
  ):
    _fit(optimizer=optax.sgd(1e6), epochs=1)
  # Past the first epoch: the batch counts from the fit's first.
  with pytest.raises(FloatingPointError, match=r"diverged at batch 10 .*epoch 1"):
    _fit(optimizer=optax.sgd(20.0), epochs=2, l2=0.0)


def test_a_divergence_keeps_the_last_good_checkpoint(tmp_path):
  with pytest.raises(FloatingPointError):
    _fit(optimizer=optax.sgd(1e6), epochs=1, steps_per_call=1, checkpoint_dir=str(tmp_path), checkpoint_every=1)
  assert sorted(int(s) for s in os.listdir(tmp_path)) == [1]  # batch 0's; the diverged batch 1 is not saved


@pytest.mark.parametrize("field", ["checkpoint_every", "epochs", "steps_per_call"])
def test_minibatch_refuses_a_count_below_one_naming_the_field(field):
  with pytest.raises(ValueError, match=rf"Minibatch: {field} must be an integer >= 1, got 0"):
    Minibatch(**{field: 0})


def test_a_fit_over_a_mesh_resumes_with_its_shardings(tmp_path):
  import jax  # noqa: PLC0415

  mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",))
  reference = _fit(mesh=mesh, epochs=2)
  with pytest.raises(_Interrupted):
    _fit(_Flaky(stop=10 + 1 + 10 + 5), mesh=mesh, epochs=2, checkpoint_dir=str(tmp_path), checkpoint_every=1)
  resumed = _fit(mesh=mesh, epochs=2, checkpoint_dir=str(tmp_path))
  _same(resumed, reference)
  assert resumed.logits["attraction"].sharding.spec == reference.logits["attraction"].sharding.spec


# Early stopping: a tiny training log (3 batches) fitted at a high learning rate with a weak prior over-fits, its
# held-out perplexity on other batches falling to epoch 4 and rising after.
OVERFIT = dict(data=LOG[:3], optimizer=optax.adam(0.1), l2=0.01)


def _held_out(fit) -> float:
  return evaluate_click_model_stream("dbn", fit.params, LOG[5:])["perplexity"]


def test_early_stopping_returns_the_best_epochs_fit_and_names_it():
  solver = Minibatch(**{**SETTINGS, "optimizer": OVERFIT["optimizer"], "epochs": 12, "patience": 2})
  stopped = fit_click_model("dbn", LOG[:3], solver=solver, num_docs=NUM_DOCS, l2=0.01, validation=LOG[5:])
  assert stopped.stop_reason.startswith("held-out perplexity stopped improving after epoch 6 of 12 (best ")
  assert "at epoch 4; 18 steps run)" in stopped.stop_reason
  assert stopped.iterations == 18  # 6 epochs of 3 batches
  best = _fit(**{**OVERFIT, "epochs": 4})  # a fixed-epochs fit of exactly the best epoch's count
  for k in best.logits:
    np.testing.assert_array_equal(np.asarray(stopped.logits[k]), np.asarray(best.logits[k]), err_msg=k)
  assert stopped.log_likelihood == best.log_likelihood
  assert stopped.perplexities == {0.01: _held_out(best)}
  assert f"best {_held_out(best):.4f} at epoch 4" in stopped.stop_reason
  assert _held_out(best) < _held_out(_fit(**{**OVERFIT, "epochs": 12}))


def test_without_validation_or_patience_every_epoch_runs():
  plain = _fit(**{**OVERFIT, "epochs": 5})
  assert plain.iterations == 15 and plain.stop_reason == "5 epoch(s) run (15 steps)"
  solver = Minibatch(**{**SETTINGS, "optimizer": OVERFIT["optimizer"], "epochs": 5, "patience": None})
  off = fit_click_model("dbn", LOG[:3], solver=solver, num_docs=NUM_DOCS, l2=0.01, validation=LOG[5:])
  _same(off, plain)


def test_patience_below_one_is_refused():
  with pytest.raises(ValueError, match=r"Minibatch: patience must be an integer >= 1 or None, got 0"):
    Minibatch(patience=0)


def test_an_early_stopped_fit_resumed_equals_the_fit_without_interruption(tmp_path):
  settings = {**SETTINGS, "optimizer": OVERFIT["optimizer"], "epochs": 12, "patience": 2}

  def fit(data, **more):
    solver = Minibatch(**{**settings, **more})
    return fit_click_model("dbn", data, solver=solver, num_docs=NUM_DOCS, l2=0.01, validation=LOG[5:])

  reference = fit(LOG[:3])
  # The counting pass reads 3 batches, the fingerprint 1, each epoch 3: stopped in epoch 5 (past the best, 4).
  with pytest.raises(_Interrupted):
    fit(_Flaky(stop=3 + 1 + 3 * 4 + 2, log=LOG[:3]), checkpoint_dir=str(tmp_path), checkpoint_every=1)
  resumed = fit(LOG[:3], checkpoint_dir=str(tmp_path), checkpoint_every=1)
  _same(resumed, reference)
  assert resumed.stop_reason == reference.stop_reason and resumed.perplexities == reference.perplexities
  _same(fit(LOG[:3], checkpoint_dir=str(tmp_path)), reference)  # the finished fit's checkpoint: no step taken
