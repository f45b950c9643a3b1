"""The memory budget is a bound on peak RSS, measured in a fresh process (issue 43, deliver 3).

A PBM is fitted by :class:`~ultr_jax.simulation.Statistics` to a long-tail log streamed from its generator (never
held in memory), once under a tight budget (the counts spill by document and the fit makes Newton passes over the
partitions) and once without one (every record in memory). The bounded fit's growth of peak RSS over the process
after its first batch stays within the budget plus the returned tables plus a fixed allowance for XLA's compiled
programs; the unbounded fit of the same log grows past that bound, so the check can fail. Slow (two fits of
600,000 sessions, minutes on 2 cores): run with ``-m slow``.
"""

import json
import subprocess
import sys
import textwrap

import pytest

_CHILD = textwrap.dedent(
  """
  import json, os, resource, sys
  import jax
  from ultr_jax import simulation as sim
  budget, n, spill_dir = int(sys.argv[1]) or None, int(sys.argv[2]), sys.argv[3]
  stream = lambda: sim.simulate_long_tail_log(
    jax.random.key(0), "pbm", num_sessions=n, num_queries=n // 4, num_candidates=20, list_size=10, batch_size=16384
  )
  next(iter(stream()))  # the generator's program compiled and the runtime warm: the baseline
  base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  solver = sim.Statistics(budget=budget, spill_dir=spill_dir, max_iters=3)
  fit = sim.fit_click_model("pbm", stream, solver=solver)
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  tables = sum(v.nbytes for v in jax.tree_util.tree_leaves(fit.params))
  print(json.dumps({"grow": (peak - base) * 1024, "tables": tables, "spilled": os.path.isdir(spill_dir) and bool(os.listdir(spill_dir))}))
  """
)
SESSIONS = 600_000
BUDGET = 32 << 20
ALLOWANCE = 256 << 20  # XLA's compiled programs and their transient buffers


def _grow(budget, tmp_path, subprocess_env):
  proc = subprocess.run(
    [sys.executable, "-c", _CHILD, str(budget), str(SESSIONS), str(tmp_path / f"spill_{budget}")],
    capture_output=True,
    text=True,
    env=subprocess_env,
    timeout=1800,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_peak_rss_of_a_bounded_fit_stays_within_its_budget(tmp_path, subprocess_env):
  bounded = _grow(BUDGET, tmp_path, subprocess_env)
  bound = BUDGET + bounded["tables"] + ALLOWANCE
  assert bounded["spilled"], bounded  # the counts outgrew the budget
  assert bounded["grow"] <= bound, (bounded, bound)
  unbounded = _grow(0, tmp_path, subprocess_env)
  # The same log without a budget needs more.
  assert not unbounded["spilled"] and unbounded["grow"] > bound, (unbounded, bound)
  print(json.dumps({"bounded": bounded, "unbounded": unbounded, "bound": bound}))
