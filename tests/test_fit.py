"""The one click-model fit (ultr_jax.simulation.fit_click_model): the solvers reach the in-memory optimum (the
statistics solver for every model: tests/test_click_stream.py), the
automatic choice takes each branch, the budget refuses before allocating, the l2 grid picks the held-out best."""

import jax
import numpy as np
import optax
import pytest

from ultr_jax import simulation as sim


@pytest.fixture(scope="module")
def log():
  """Cascade sessions (at most one click each), which every fittable model explains; 8 queries of 4 documents."""
  attraction = jax.random.uniform(jax.random.key(3), (8, 4), minval=0.05, maxval=0.9)
  out = sim.simulate_session_log(jax.random.key(0), "cascade", attraction, num_sessions=600, noise=1.0)
  arrays = {k: np.asarray(out[k]) for k in ("doc_ids", "clicks", "where")}
  train = {k: v[:480] for k, v in arrays.items()}
  test = {k: v[480:] for k, v in arrays.items()}
  return train, test


def _perplexity(model, fit, test):
  return sim.evaluate_click_model(model, fit.params, test["doc_ids"], test["clicks"], where=test["where"])["perplexity"]


@pytest.mark.parametrize("model", ("dbn",))
def test_minibatch_reaches_in_memory_optimum(model, log):
  """Full-batch steps with Adam for long enough reach the exact optimum (the solver is approximate only in its
  stopping, not in its objective). 500 steps (one jitted call): the held-out perplexities then agree to float32
  rounding (measured: a gap of 1e-5 after 300 steps, 4e-7 after 400, 0 after 500 and after 1500)."""
  train, test = log
  exact = sim.fit_click_model(model, train, solver=sim.LBFGS(tol=1e-6), num_docs=32, prior="zero")
  solver = sim.Minibatch(optimizer=optax.adam(0.05), epochs=500, sparse=False, steps_per_call=500)
  fit = sim.fit_click_model(model, [train], solver=solver, num_docs=32, prior="zero")
  assert fit.iterations == 500 and "500 epoch" in fit.stop_reason
  assert abs(_perplexity(model, fit, test) - _perplexity(model, exact, test)) < 1e-4


def test_partitioned_statistics_equal_in_memory_optimum(log, tmp_path):
  """A budget too small for the counts spills them; the Newton passes reach the in-memory optimum."""
  train, test = log
  exact = sim.fit_click_model("pbm", train, solver=sim.LBFGS(tol=1e-6), num_docs=32)
  solver = sim.Statistics(budget=256, spill_dir=str(tmp_path), num_partitions=4, tol=1e-6)
  fit = sim.fit_click_model("pbm", [train], solver=solver, num_docs=32)
  assert isinstance(solver.gather(sim.get_click_model("pbm"), [train]), sim.PartitionedStatistics)
  assert abs(_perplexity("pbm", fit, test) - _perplexity("pbm", exact, test)) < 1e-4


def test_automatic_choice_takes_each_branch(log):
  train, _ = log
  assert isinstance(sim.fit_click_model("dctr", train).solver, sim.Counts)
  fit = sim.fit_click_model("ubm", [train])
  assert isinstance(fit.solver, sim.Statistics) and fit.converged and fit.stop_reason.startswith("converged")
  # The DBN's session patterns under a budget they outgrow: the automatic choice moves to the minibatch fit
  # before allocating the statistics fit's program, and says why.
  tight = sim.Statistics(budget=4096, fallback=sim.Minibatch(epochs=2))
  fit = sim.fit_click_model("dbn", [train], solver=tight)
  assert isinstance(fit.solver, sim.Minibatch) and "the fallback" in fit.stop_reason and "budget" in fit.stop_reason
  assert np.isfinite(fit.log_likelihood)
  with pytest.raises(sim.StatisticsTooLarge, match="budget"):  # no fallback: refused, naming the budget
    sim.fit_click_model("dbn", [train], solver=sim.Statistics(budget=4096))
  with pytest.raises(sim.StatisticsTooLarge, match="read the sessions again"):  # a generator cannot be read twice
    sim.fit_click_model("dbn", (b for b in [train]), solver=tight)


def test_budget_refuses_the_fit_program_before_allocating(log):
  """Statistics that fit in the budget but whose fit's working memory would not: refused before it runs."""
  train, _ = log
  stats = sim.gather_click_statistics("dbn", [train])
  with pytest.raises(sim.StatisticsTooLarge, match="working memory"):
    sim.fit_click_model("dbn", stats, solver=sim.Statistics(budget=stats.keys.nbytes + stats.counts.nbytes))


def test_l2_grid_picks_the_held_out_best(log):
  train, test = log
  fit = sim.fit_click_model("pbm", [train], l2=(0.1, 10.0, 1.0), validation=[test], num_docs=32)
  assert sorted(fit.perplexities) == [0.1, 1.0, 10.0]
  assert fit.perplexities[fit.l2] == min(fit.perplexities.values())
  one = sim.fit_click_model("pbm", [train], l2=fit.l2, num_docs=32)
  assert abs(_perplexity("pbm", one, test) - fit.perplexities[fit.l2]) < 1e-4
  with pytest.raises(ValueError, match="validation"):
    sim.fit_click_model("pbm", [train], l2=(0.1, 1.0))
  single = sim.fit_click_model("pbm", [train], l2=[fit.l2], validation=[test], num_docs=32)
  assert single.perplexities == pytest.approx({fit.l2: fit.perplexities[fit.l2]}, abs=1e-6)
  # A grid whose statistics outgrow the budget: every value by the fallback, on the sessions.
  tight = sim.Statistics(budget=64, fallback=sim.Minibatch(epochs=1))
  fallen = sim.fit_click_model("dbn", [train], l2=(0.5, 2.0), validation=[test], solver=tight, num_docs=32)
  assert isinstance(fallen.solver, sim.Minibatch) and sorted(fallen.perplexities) == [0.5, 2.0]


@pytest.mark.parametrize(
  "kwargs, match",
  [
    (dict(solver=sim.Counts()), "unknown CTR model 'pbm'"),
    (dict(solver="lbfgs"), "must be a Solver"),
    (dict(l2=-1.0), "l2 must be finite and >= 0"),
    (dict(l2=float("nan")), "l2 must be finite and >= 0"),
    (dict(prior="mean"), "prior must be one of"),
  ],
)
def test_bad_arguments_are_named(kwargs, match, log):
  train, _ = log
  with pytest.raises((ValueError, TypeError), match=match):
    sim.fit_click_model("pbm", train, **kwargs)


def test_ctr_counts_equal_from_statistics(log):
  """Counting from arrays and from a stream's statistics gives the same rates."""
  train, _ = log
  a = sim.fit_click_model("drctr", train, num_docs=32).params
  b = sim.fit_click_model("drctr", [train], num_docs=32).params
  for k in a:
    np.testing.assert_allclose(a[k], b[k], rtol=1e-6)
  with pytest.raises(ValueError, match="unknown click model 'dctr'"):
    sim.fit_click_model("dctr", train, solver=sim.LBFGS())
  with pytest.raises(ValueError, match=r"Counts\(prior=...\)"):
    sim.fit_click_model("dctr", train, prior="zero")


def test_one_fit_function_is_public():
  assert [n for n in sim.__all__ if n.startswith("fit_")] == ["fit_click_model"]


def test_no_private_cross_imports_between_the_fitting_modules():
  """The scale path's modules (fit.py and the modules holding the solvers' math) use each other's module-level
  names only, never a private (``_``) one: no ``from ultr_jax.simulation.m import _x``, no ``m._x``."""
  import ast  # noqa: PLC0415
  import pathlib  # noqa: PLC0415

  modules = ("fit", "fitting", "streaming", "minibatch", "partitioned_fit")
  root = pathlib.Path(sim.__file__).parent
  found = []
  for name in modules:
    nodes = list(ast.walk(ast.parse((root / f"{name}.py").read_text())))
    siblings = set()  # the sibling modules imported as modules (`from ultr_jax.simulation import minibatch`)
    for node in nodes:
      if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in modules:
        found += [f"{name}.py:{node.lineno} {a.name}" for a in node.names if a.name.startswith("_")]
      if isinstance(node, ast.ImportFrom) and node.module == "ultr_jax.simulation":
        siblings |= {a.asname or a.name for a in node.names if a.name in modules}
    for node in nodes:
      is_sibling = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in siblings
      if is_sibling and node.attr.startswith("_"):
        found.append(f"{name}.py:{node.lineno} {node.value.id}.{node.attr}")
  assert not found, found


@pytest.mark.parametrize("solver", [sim.LBFGS(), sim.Statistics(), sim.Counts()], ids=lambda s: type(s).__name__)
def test_a_batch_s_valid_sessions_are_the_only_ones_fitted(solver, log):
  """``valid`` (a fixed-shape stream's padding rows) counts in a single batch dict as in a list of them."""
  train, _ = log
  valid = np.arange(480) % 2 == 0
  model = "dctr" if isinstance(solver, sim.Counts) else "pbm"
  half = sim.fit_click_model(model, {k: v[valid] for k, v in train.items()}, solver=solver, num_docs=32)
  masked = sim.fit_click_model(model, {**train, "valid": valid}, solver=solver, num_docs=32)
  for k in half.params:
    np.testing.assert_allclose(masked.params[k], half.params[k], atol=1e-5, err_msg=k)
