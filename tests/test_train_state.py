"""The training core's pieces on their own (as flax's examples test ``train_step``): the typed state, the jitted
steps and ``evaluate``; and what an accelerator needs of ``fit``: no implicit host transfer in its steady-state
steps, one compilation of the step for fixed shapes, and a resume from a checkpoint of the dict-layout state."""

import dataclasses
import json
import shutil

import jax
import numpy as np

from conftest import _count_compiles
from ultr_jax import data, simulation
from ultr_jax.train import (
  TrainState,
  create_train_state,
  default_train_config,
  evaluate,
  fit,
  get_method,
  make_mesh,
  make_optimizer,
  make_train_steps,
  place_train,
  write_results,
)
from ultr_jax.train import loop as loop_lib
from ultr_jax._checkpoint import Checkpointer

from ultr_jax.train.sharding import replicated

SPLITS = data.make_synthetic(num_train=16, num_valid=4, num_test=4, list_size=4, num_features=3, seed=0)
TRAIN = SPLITS.train.with_extras(clicks=(SPLITS.train.labels >= 2).astype(np.float32))
PBM = simulation.make_click_fn({"name": "pbm_table", "eta": 1.0})


def _config(**kw):
  c = default_train_config()
  c.steps, c.batch_size, c.eval_every, c.progress, c.steps_per_call = 6, 4, 3, False, 1
  c.update(kw)
  return c


def _method():
  return get_method("naive", {"ranker": "linear"}, num_features=3, list_size=4)


def _setup(seeds=(0, 1)):
  m, c, mesh = _method(), _config(), make_mesh(1)
  tx = make_optimizer(c)
  arrays, layout = place_train(TRAIN, mesh, c, seeds=seeds)
  state = create_train_state(
    m, tx, np.asarray(seeds, np.uint32), arrays, layout.indices(0), layout=layout, sharding=replicated(mesh)
  )
  return m, tx, mesh, arrays, layout, state


def test_create_train_state_starts_every_seed_at_its_own_init():
  m, _, _, _, _, state = _setup()
  assert isinstance(state, TrainState) and state.num_seeds == 2
  assert int(state.step) == 0 and state.best_metric.tolist() == [-np.inf, -np.inf]
  assert state.best_step.tolist() == [0, 0] and state.evals_since_best.tolist() == [0, 0]
  # Seed s's params are method.init of the first half of its key, its run key the second half.
  for s in (0, 1):
    init_key, run_key = jax.random.split(jax.random.key(s))
    want = m.init(init_key, None)[0]
    got = jax.tree.map(lambda x: x[s], state.params)
    jax.tree.map(np.testing.assert_array_equal, got, want)
    np.testing.assert_array_equal(state.rng[s], jax.random.key_data(run_key))
  jax.tree.map(np.testing.assert_array_equal, state.best_params, state.params)
  # A pytree: a leaf per field, mapped over like any other.
  assert jax.tree.map(lambda x: x, state).step.shape == ()


def test_train_steps_take_one_optimizer_step_per_live_step():
  m, tx, mesh, arrays, layout, state = _setup()
  steps = make_train_steps(m, tx, layout=layout, click_fn=None, display="logged", batch_sharding=replicated(mesh))
  idx = np.stack([layout.indices(0), layout.indices(1)])
  # The step by hand (jitted: one compilation): seed 0's loss gradient on its own batch, then the optimizer's update.
  batch0 = TRAIN.as_batch(layout.indices(0)[0])

  @jax.jit
  def by_hand(params, rng):
    loss_key = jax.random.split(jax.random.fold_in(jax.random.wrap_key_data(rng), 0))[1]
    grads = jax.grad(lambda p: m.loss(p, {}, batch0, loss_key)[0])(params)
    updates, _ = tx.update(grads, tx.init(params), params)
    return jax.tree.map(lambda p, u: p + u, params, updates)

  want = by_hand(jax.tree.map(lambda x: x[0], state.params), state.rng[0])
  state1, sm, diagnosis = steps(state, arrays, idx, np.array([True, False]))  # the second step is not live
  assert int(state1.step) == 1 and sm["loss"].shape == (2,) and int(diagnosis["first"]) == -1
  got = jax.tree.map(lambda x: np.asarray(x[0]), state1.params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), got, want)
  assert state1.best_metric.tolist() == [-np.inf, -np.inf]  # the step leaves the best-so-far state alone


def test_evaluate_matches_a_numpy_ndcg():
  m = _method()
  params = jax.vmap(lambda k: m.init(k, None)[0])(jax.random.split(jax.random.key(0), 2))
  out = evaluate(m, params, SPLITS.test, cutoffs=(10,))
  scores = np.asarray(jax.vmap(lambda p: m.score(p, SPLITS.test.as_batch()))(params))
  labels, where = np.asarray(SPLITS.test.labels), np.asarray(SPLITS.test.where)

  def ndcg(s, y, w):
    order = np.argsort(-np.where(w, s, -np.inf), kind="stable")
    gains = (2.0 ** np.where(w, y, 0.0) - 1.0)[order] * w[order]
    disc = 1.0 / np.log2(np.arange(2, len(y) + 2))
    ideal = np.sort(np.where(w, 2.0**y - 1.0, 0.0))[::-1] @ disc
    return gains @ disc / ideal if ideal > 0 else 0.0

  for s in range(2):
    want = np.mean([ndcg(scores[s, q], labels[q], where[q]) for q in range(labels.shape[0])])
    np.testing.assert_allclose(out["ndcg@10"][s], want, rtol=1e-5)


def _guarded_steps(monkeypatch):
  """Wraps fit's jitted steps: every call after the first (compiling) one runs under
  ``jax.transfer_guard("disallow")`` and with XLA compilations counted."""
  real = loop_lib.make_train_steps
  calls, compiles = [], [0]

  def make(*args, **kwargs):
    steps = real(*args, **kwargs)

    def run(*a):
      if not calls:
        out = jax.block_until_ready(steps(*a))
      else:
        with jax.transfer_guard("disallow"), _count_compiles() as count:
          out = jax.block_until_ready(steps(*a))
        compiles[0] += count[0]
      calls.append(1)
      return out

    return run

  monkeypatch.setattr(loop_lib, "make_train_steps", make)
  return calls, compiles


def test_fit_steady_state_steps_transfer_nothing_implicitly_and_compile_once(monkeypatch):
  calls, compiles = _guarded_steps(monkeypatch)
  result = fit(_method(), SPLITS.train, SPLITS.valid, click_fn=PBM, config=_config(), seeds=(0, 1))
  assert len(calls) == 6 and [h["step"] for h in result.history] == [3, 6]
  assert compiles[0] == 0, f"the step compiled {compiles[0]} more times after its first call"


def test_resume_from_a_dict_layout_checkpoint(tmp_path):
  """A checkpoint written before the state was a TrainState (a dict with the same keys) resumes as it did."""
  c = _config(checkpoint_every=3)
  whole = fit(_method(), SPLITS.train, SPLITS.valid, click_fn=PBM, config=c, seeds=(0, 1))
  fit(_method(), SPLITS.train, SPLITS.valid, click_fn=PBM, config=_config(steps=3), seeds=(0, 1), workdir=tmp_path)
  ckpt = Checkpointer(str(tmp_path / "checkpoints" / "naive"))
  meta = ckpt.restore_meta(3)
  _, _, _, _, _, like = _setup()
  state, _ = ckpt.restore(like, 3)
  ckpt.close()
  old = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}  # the old layout
  shutil.rmtree(tmp_path / "checkpoints" / "naive")
  ckpt = Checkpointer(str(tmp_path / "checkpoints" / "naive"))
  ckpt.save(3, old, meta)
  ckpt.close()
  resumed = fit(_method(), SPLITS.train, SPLITS.valid, click_fn=PBM, config=c, seeds=(0, 1), workdir=tmp_path)
  assert [h["step"] for h in resumed.history] == [3, 6]
  jax.tree.map(np.testing.assert_array_equal, resumed.final_params, whole.final_params)
  # Its FitResult feeds write_results: the run's fingerprint, and its diverged seeds (here one, marked by hand).
  write_results(str(tmp_path), {"naive": {}}, fits={"naive": resumed._replace(diverged=np.array([False, True]))})
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["_fingerprint"]["runs"] == {"naive": resumed.fingerprint["hash"]}
  assert saved["_diverged"] == {"naive": [1]}
