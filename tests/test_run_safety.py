"""A run never silently resumes another run's checkpoint, never reports metrics of a diverged model as normal,
and marks its workdir while it runs; files get the usual permissions."""

import json
import os
import shutil
import stat

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ultr_jax import data, simulation
from ultr_jax.train import (
  default_train_config,
  evaluate,
  fit,
  get_method,
  run_fingerprint,
  run_in_progress,
  write_results,
)
from ultr_jax.train import results as results_lib

SPLITS = data.make_synthetic(num_train=32, num_valid=8, num_test=8, list_size=6, num_features=4, seed=0)
PBM = simulation.make_click_fn({"name": "pbm_table", "eta": 1.0, "eps": 0.1})


def _config(**kw):
  c = default_train_config()
  c.steps, c.batch_size, c.eval_every, c.progress = 8, 8, 4, False
  c.update(kw)
  return c


def _method(**kw):
  return get_method("ips", {"ranker": "linear", **kw}, num_features=4, list_size=6)


def _mlp():
  """An MLP that Adam at learning rate 1e30 (the issue's reproduction) drives to NaN at the first steps."""
  return get_method("ips", {"hidden_sizes": (8,)}, num_features=4, list_size=6)


def _fit(workdir, *, click_fn=PBM, method=None, train=SPLITS.train, **config):
  return fit(
    method or _method(),
    train,
    SPLITS.valid,
    click_fn=click_fn,
    config=_config(**config),
    seeds=(0, 1),
    workdir=str(workdir),
  )


# ----------------------------------------------------------------------------
# Fingerprints.


def test_fingerprint_names_what_differs():
  base = run_fingerprint(_method(), SPLITS.train, SPLITS.valid, click_fn=PBM, config=_config())
  assert base == run_fingerprint(_method(), SPLITS.train, SPLITS.valid, click_fn=PBM, config=_config())
  trust = simulation.make_click_fn({"name": "trust", "eta": 1.0, "eps": 0.1})
  eta2 = simulation.make_click_fn({"name": "pbm_table", "eta": 2.0, "eps": 0.1})
  other_data = data.make_synthetic(num_train=32, num_valid=8, num_test=8, list_size=6, num_features=4, seed=1)
  cases = {
    "clicks": run_fingerprint(_method(), SPLITS.train, SPLITS.valid, click_fn=trust, config=_config()),
    "clicks ": run_fingerprint(_method(), SPLITS.train, SPLITS.valid, click_fn=eta2, config=_config()),
    "train_data": run_fingerprint(_method(), other_data.train, SPLITS.valid, click_fn=PBM, config=_config()),
    "method_config.propensity_clip": run_fingerprint(
      _method(propensity_clip=0.1), SPLITS.train, SPLITS.valid, click_fn=PBM, config=_config()
    ),
    "train_config.learning_rate": run_fingerprint(
      _method(), SPLITS.train, SPLITS.valid, click_fn=PBM, config=_config(learning_rate=0.5)
    ),
  }
  from ultr_jax.train import fingerprint_diff

  for want, fp in cases.items():
    assert want.strip() in fingerprint_diff(base, fp), (want, fingerprint_diff(base, fp))
    assert fp["hash"] != base["hash"]
  # Output-only settings do not change it (nor do the steps: a finished run can be extended).
  same = run_fingerprint(_method(), SPLITS.train, SPLITS.valid, click_fn=PBM, config=_config(progress=True, steps=99))
  assert same["hash"] == base["hash"]


def test_resume_refuses_another_runs_checkpoint_and_restart_starts_over(tmp_path):
  first = _fit(tmp_path / "a")
  shutil.copytree(tmp_path / "a", tmp_path / "b")
  trust = simulation.make_click_fn({"name": "trust", "eta": 1.0, "eps": 0.1})
  with pytest.raises(ValueError, match=r"different run: .*clicks.*train_config\.learning_rate.*restart=True"):
    _fit(tmp_path / "b", click_fn=trust, learning_rate=0.5)
  # A change of shapes: the same clear error, not orbax's tree-structure trace.
  wide = get_method("ips", {"hidden_sizes": (3,)}, num_features=4, list_size=6)
  with pytest.raises(ValueError, match=r"different run: .*method_config\.hidden_sizes.*method_state"):
    _fit(tmp_path / "b", method=wide)
  # restart=True deletes the old checkpoints: the run equals one in a fresh workdir.
  restarted = _fit(tmp_path / "b", click_fn=trust, learning_rate=0.5, restart=True)
  fresh = _fit(tmp_path / "c", click_fn=trust, learning_rate=0.5)
  np.testing.assert_array_equal(
    restarted.final_params["relevance"]["out"]["kernel"], fresh.final_params["relevance"]["out"]["kernel"]
  )
  assert restarted.history == fresh.history != first.history
  # The same run resumes (its history restored, nothing retrained).
  again = _fit(tmp_path / "c", click_fn=trust, learning_rate=0.5)
  assert again.history == fresh.history and again.fingerprint["hash"] == fresh.fingerprint["hash"]
  # A checkpoint past config.steps is refused.
  with pytest.raises(ValueError, match="past config.steps"):
    _fit(tmp_path / "c", click_fn=trust, learning_rate=0.5, steps=4)


def test_results_carry_the_fingerprints_of_the_runs_fit_trained(tmp_path):
  result = _fit(tmp_path)
  write_results(str(tmp_path), {"ips": {"ndcg@10": 0.5}}, fits={"ips": result})
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["_fingerprint"]["runs"] == {"ips": result.fingerprint["hash"]}
  assert "_diverged" not in saved


# ----------------------------------------------------------------------------
# Divergence.


def test_divergence_stops_the_run_with_a_clear_error(tmp_path):
  with pytest.raises(FloatingPointError, match=r"diverged at step 4: seed\(s\) \[0, 1\] have a non-finite"):
    _fit(tmp_path, method=_mlp(), learning_rate=1e30)


def test_divergence_marked_per_seed(tmp_path):
  with run_in_progress(str(tmp_path)) as run:
    result = fit(
      _mlp(),
      SPLITS.train,
      SPLITS.valid,
      click_fn=PBM,
      config=_config(learning_rate=1e30, on_divergence="mark"),
      seeds=(0, 1),
    )
    write_results(
      str(tmp_path),
      {"ips": {"ndcg@10": None}},
      rows={"ips": {"ndcg@10": None}},
      columns=["ndcg@10"],
      fits={"ips": result},
    )
  assert result.diverged.tolist() == [True, True]
  assert all(h["diverged"] == [True, True] for h in result.history)
  # No metric from NaN scores: validation metrics are NaN, and no state was selected on them.
  assert all(np.isnan(h["valid/ndcg@10"]).all() for h in result.history)
  assert run.exit_code != 0 and run.diverged == {"ips": [0, 1]}
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["_diverged"] == {"ips": [0, 1]}
  assert "Diverged" in (tmp_path / "table.md").read_text()


DAMAGED_RESULTS = [
  # (id, results.json's text, what the error says after the file's path); each was a bare error before
  ("truncated", '{"ips": {"ndcg@10": 0.5', "got malformed JSON at line 1, column 24"),  # JSONDecodeError, no path
  ("a list", "[1]", "got a list"),  # AttributeError
  ("_diverged a list", '{"_diverged": [4]}', "got ['_diverged'] holding a list"),  # TypeError from dict([4])
]


@pytest.mark.parametrize("case", DAMAGED_RESULTS, ids=[c[0] for c in DAMAGED_RESULTS])
def test_a_damaged_results_json_names_itself_in_the_exit_code(tmp_path, case):
  _, text, got = case
  with run_in_progress(str(tmp_path)) as run:
    (tmp_path / "results.json").write_text(text)
  with pytest.raises(ValueError) as e:
    _ = run.exit_code
  assert str(e.value).startswith(f"{tmp_path / 'results.json'}: expected the run's results, ") and got in str(e.value)


def test_evaluate_refuses_non_finite_scores():
  m = _method()
  params = jax.vmap(lambda k: m.init(k, None)[0])(jax.random.split(jax.random.key(0), 3))
  ok = evaluate(m, params, SPLITS.test)
  # Seed 1 has NaN weights: its scores tie, and the tied order would give a normal-looking nDCG.
  bad = jax.tree.map(lambda x: x.at[1].set(jnp.nan), params)
  out = evaluate(m, bad, SPLITS.test)
  for k, v in out.items():
    assert np.isnan(v[1]), k
    np.testing.assert_array_equal(v[[0, 2]], ok[k][[0, 2]])


# ----------------------------------------------------------------------------
# Outputs.


def test_written_files_get_the_umask_permissions(tmp_path):
  old = os.umask(0o027)
  try:
    write_results(str(tmp_path), {"a": 1}, rows={"a": {"x": 1.0}}, columns=["x"])
  finally:
    os.umask(old)
  for name in ("results.json", "table.md", "table.csv"):
    assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o640, name
  assert sorted(os.listdir(tmp_path)) == ["results.json", "table.csv", "table.md"]  # no temp file left


def test_atomic_write_removes_its_temp_file_on_failure(tmp_path):
  with pytest.raises(TypeError):
    results_lib.atomic_write_text(str(tmp_path / "x.txt"), 123)  # not text: the write fails
  assert os.listdir(tmp_path) == []


def test_run_in_progress_marks_the_workdir_and_moves_stale_results(tmp_path):
  write_results(str(tmp_path), {"old": 1}, table="| old |")
  with pytest.raises(RuntimeError):
    with run_in_progress(str(tmp_path)):
      assert (tmp_path / "IN_PROGRESS").exists()
      assert not (tmp_path / "results.json").exists()  # the previous run's results are never this run's
      raise RuntimeError("crash")
  marker = (tmp_path / "IN_PROGRESS").read_text()
  assert "failed: RuntimeError: crash" in marker
  assert json.loads((tmp_path / "stale" / "results.json").read_text()) == {"old": 1}
  with run_in_progress(str(tmp_path)) as run:
    write_results(str(tmp_path), {"new": 1})
  assert not (tmp_path / "IN_PROGRESS").exists() and run.exit_code == 0
  assert json.loads((tmp_path / "results.json").read_text()) == {"new": 1}
