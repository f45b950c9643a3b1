"""Click-simulation throughput: jitted JAX samplers vs NumPy and a Python loop.

Sessions per second of ``ultr_jax.simulation`` (PBM with ULTRA's eye-tracking
table, the cascade model, the DBN (perseverance 0.9, satisfaction = attraction)
and the user browsing model with the distance table of ``UBM.gamma_table``) on ``--queries`` lists of ``--list-size``
documents, ``--sessions`` sessions per list per call, against, in the same
process:

(a) a vectorised NumPy implementation of the same model;
(b) a per-list, per-position Python loop in the style of ULTRA's
    ``click_models.py`` (``random.random() < exam_p * click_p``), timed on a
    subset of lists and reported as sessions/s.

  python benchmarks/click_simulation.py            # 10k queries x 20 docs
  python benchmarks/click_simulation.py --queries 2000 --sessions 4   # quick
"""

import argparse
import random
import time

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax import simulation as sim

TABLE = np.array(sim.ULTRA_EXAM_TABLE)
TABLE_LIST = list(sim.ULTRA_EXAM_TABLE)  # plain floats for the Python loop, as in ULTRA


def _best_time(fn, repeats):
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t)
  return best


def numpy_pbm(rng, labels, sessions):
  rel = 0.1 + 0.9 * (2.0**labels - 1) / 15.0
  exam = TABLE[np.minimum(np.arange(labels.shape[-1]), 9)]
  return rng.random((sessions,) + labels.shape) < exam * rel


def numpy_cascade(rng, labels, sessions):
  rel = 0.1 + 0.9 * (2.0**labels - 1) / 15.0
  attracted = rng.random((sessions,) + labels.shape) < rel
  stop = attracted.astype(np.int32)
  return attracted & ((np.cumsum(stop, -1) - stop) == 0)


def numpy_ubm(rng, labels, sessions):
  rel = 0.1 + 0.9 * (2.0**labels - 1) / 15.0
  gamma = sim.UBM.gamma_table(labels.shape[-1])
  u = rng.random((sessions,) + labels.shape)
  last = np.zeros((sessions,) + labels.shape[:-1], np.int64)
  clicks = np.zeros(u.shape, bool)
  for rank in range(labels.shape[-1]):  # the model is sequential in rank
    clicks[..., rank] = u[..., rank] < gamma[rank, last] * rel[..., rank]
    last = np.where(clicks[..., rank], rank + 1, last)
  return clicks


def numpy_dbn(rng, labels, sessions, gamma=0.9):
  rel = 0.1 + 0.9 * (2.0**labels - 1) / 15.0
  attracted = rng.random((sessions,) + labels.shape) < rel
  stop = rng.random(attracted.shape) >= np.where(attracted, gamma * (1 - rel), gamma)
  stop = stop.astype(np.int32)
  return attracted & ((np.cumsum(stop, -1) - stop) == 0)


def loop_dbn(labels_list, sessions, gamma=0.9):
  click_prob = [0.1 + 0.9 * (2.0**y - 1) / 15.0 for y in range(5)]
  out = []
  for _ in range(sessions):
    for labels in labels_list:
      clicks, active = [], True
      for y in labels:
        p = click_prob[int(y)]
        click = 1 if active and random.random() < p else 0
        clicks.append(click)
        if active:  # satisfied after a click (probability = attraction), else go on with gamma
          active = random.random() < (gamma * (1 - p) if click else gamma)
      out.append(clicks)
  return out


def loop_ubm(labels_list, sessions):
  click_prob = [0.1 + 0.9 * (2.0**y - 1) / 15.0 for y in range(5)]
  out = []
  for _ in range(sessions):
    for labels in labels_list:
      clicks, last = [], 0
      for rank, y in enumerate(labels):
        d = rank + 1 - last  # distance to the last click (to the top without one)
        exam_p = TABLE_LIST[d - 1 if d <= len(TABLE_LIST) else -1]
        click = 1 if random.random() < exam_p * click_prob[int(y)] else 0
        last = rank + 1 if click else last
        clicks.append(click)
      out.append(clicks)
  return out


def loop_pbm(labels_list, sessions):
  click_prob = [0.1 + 0.9 * (2.0**y - 1) / 15.0 for y in range(5)]
  out = []
  for _ in range(sessions):
    for labels in labels_list:
      clicks = []
      for rank, y in enumerate(labels):
        exam_p = TABLE_LIST[rank if rank < len(TABLE_LIST) else -1]
        clicks.append(1 if random.random() < exam_p * click_prob[int(y)] else 0)
      out.append(clicks)
  return out


def loop_cascade(labels_list, sessions):
  click_prob = [0.1 + 0.9 * (2.0**y - 1) / 15.0 for y in range(5)]
  out = []
  for _ in range(sessions):
    for labels in labels_list:
      clicks, has_click = [], False
      for y in labels:  # ULTRA draws every rank, then discards clicks after the first
        click = 1 if random.random() < click_prob[int(y)] else 0
        clicks.append(0 if has_click else click)
        has_click = has_click or click > 0
      out.append(clicks)
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--queries", type=int, default=10_000)
  parser.add_argument("--list-size", type=int, default=20)
  parser.add_argument("--sessions", type=int, default=10, help="sessions per list per call")
  parser.add_argument("--loop-lists", type=int, default=1000, help="lists timed in the Python loop")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--prng", default="threefry2x32,rbg", help="comma-separated jax PRNG implementations to time")
  args = parser.parse_args()

  q, l, s = args.queries, args.list_size, args.sessions
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 5, size=(q, l)).astype(np.float32)
  where = np.ones((q, l), bool)
  batch = {"labels": jnp.asarray(labels), "where": jnp.asarray(where)}
  total = q * s
  print(
    f"backend {jax.default_backend()} ({jax.devices()[0].device_kind}); "
    f"{q} lists x {l} docs x {s} sessions per call = {total:,} sessions"
  )
  print(f"{'model':<9} {'impl':<22} {'sessions/s':>14} {'1st row /':>10}")
  for name, np_fn, loop_fn in (
    ("pbm", numpy_pbm, loop_pbm),
    ("cascade", numpy_cascade, loop_cascade),
    ("dbn", numpy_dbn, loop_dbn),
    ("ubm", numpy_ubm, loop_ubm),
  ):
    cfg = {"name": "pbm_table" if name == "pbm" else name, "num_sessions": s}
    click_fn = jax.jit(sim.make_click_fn(cfg))
    rates = {}
    for impl in args.prng.split(","):
      keys = iter(jax.random.split(jax.random.key(0, impl=impl), args.repeats + 1))
      click_fn(next(keys), batch)["clicks"].block_until_ready()  # compile
      t_jax = _best_time(lambda: click_fn(next(keys), batch)["clicks"].block_until_ready(), args.repeats)
      rates[f"jax jit ({impl})"] = total / t_jax
    t_np = _best_time(lambda: np_fn(rng, labels, s), args.repeats)
    sub = labels[: args.loop_lists].tolist()
    t_loop = _best_time(lambda: loop_fn(sub, 1), 1) * (q / len(sub)) * s
    rates["numpy (vectorised)"] = total / t_np
    rates["python loop (ULTRA)"] = total / t_loop
    ref = next(iter(rates.values()))
    for impl, rate in rates.items():
      print(f"{name:<9} {impl:<22} {rate:>14,.0f} {ref / rate:>9.1f}x")


if __name__ == "__main__":
  main()
