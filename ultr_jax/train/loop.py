"""The generic training loop: jitted, vmapped over seeds, sharded over queries.

One loop trains every :class:`~ultr_jax.train.Method` (naive, IPS, DLA, LBD,
CLD, SIF ...):

* the training lists live on the device(s) once; each step gathers a
  fixed-shape batch of query indices inside the jitted step, so nothing is
  copied from the host per step and the step compiles exactly once;
* clicks are simulated inside the step by ``click_fn(key, batch)`` (fresh
  sessions every step, as in ULTRA's online simulation), or read from the
  dataset when ``click_fn`` is None (logged clicks);
* the users see each list in its stored order (``config.display =
  "logged"``, the logging policy's), or as the ranker being trained ranks it
  at that step (``"model"``: by score; ``"model_sample"``: a Plackett-Luce
  sample of the scores), ULTRA's deterministic and stochastic online
  simulation feeds, which put offline methods in the online setting of Ai et
  al. (TOIS 2021, "Unbiased Learning to Rank: Online or Offline?");
* independent seeds run in lockstep under ``jax.vmap`` (different
  initialisations, click draws and batch orders);
* the batch's query axis is sharded over a ``jax.sharding.Mesh`` (data
  parallel); parameters are replicated;
* the best state on the validation metric is kept per seed, with optional
  early stopping, and the whole state (every tower, the optimizer state,
  the step, the RNG and the best-so-far state) is checkpointed with orbax
  and resumed from the newest readable checkpoint, once its fingerprint (method and
  config, every byte of the data or the stream's identity, clicks, training config) matches the
  run's (:func:`run_fingerprint`); a run holds its workdir (``IN_PROGRESS``, :mod:`ultr_jax._workdir`);
* padded entries are zeroed (:func:`ultr_jax.train.input.mask_padding`: in-memory lists once, as they are
  placed; a streamed batch as it enters the step);
* the loss and parameters are checked for finite values at every evaluation: a
  diverged run stops with an error naming the step, batch and input field or parameter that
  went non-finite first, or (``on_divergence="mark"``) its seeds are marked ``diverged``
  (:attr:`FitResult.diverged`).

The pieces, each usable alone: :mod:`ultr_jax.train.defaults` (the config), :mod:`~ultr_jax.train.input` (the
lists on the devices and the batches), :mod:`~ultr_jax.train.stream` (a stream's reader),
:mod:`~ultr_jax.train.state` (the train state), :mod:`~ultr_jax.train.step` (the jitted step),
:mod:`~ultr_jax.train.evaluation`, :mod:`~ultr_jax.train.fingerprint`, :mod:`~ultr_jax._checkpoint`
(checkpoints and their restoring, shared with the minibatch click-model fit), :mod:`~ultr_jax.train.divergence`
and :mod:`~ultr_jax._workdir`.
"""

import dataclasses
import functools
import math
import os
import shutil
import sys
import time
from typing import Any, NamedTuple, Optional, Protocol, Sequence

from absl import flags as absl_flags
from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from ultr_jax.data import RankingDataset
from ultr_jax.train import sharding as sharding_lib
from ultr_jax import _workdir as workdir_lock
from ultr_jax._checkpoint import ON_CORRUPT, Checkpointer, restore_checkpoint
from ultr_jax.train.schema import validate_train_config
from ultr_jax._divergence import first_nonfinite
from ultr_jax.train.divergence import check_selection_metric, divergence_cause
from ultr_jax.train.defaults import (
  DEFAULT_CUTOFFS,
  DISPLAYS,
  ON_DIVERGENCE,
  default_train_config,
  make_optimizer,
  with_defaults,
)
from ultr_jax.train.evaluation import evaluate, evaluate_clicks, predict
from ultr_jax._fingerprint import fingerprint_diff
from ultr_jax.train.fingerprint import make_fingerprint, run_fingerprint, stream_digest
from ultr_jax.train.input import TrainLayout, place_train, training_arrays
from ultr_jax.train.method import Method
from ultr_jax.train.results import FitResult
from ultr_jax.train.state import TrainState, create_train_state, finite_params, host, local, update_best
from ultr_jax.train.step import TrainSteps, display_batch, make_train_steps
from ultr_jax.train.stream import StreamReader
from ultr_jax.types import ClickFn

__all__ = [
  "DISPLAYS",
  "OnEval",
  "default_train_config",
  "display_batch",
  "make_optimizer",
  "fit",
  "training_arrays",
  "evaluate",
  "evaluate_clicks",
  "predict",
  "FitResult",
  "DEFAULT_CUTOFFS",
  "run_fingerprint",
  "fingerprint_diff",
]


def _progress(message: str) -> None:
  """A progress line: ``absl.logging.info`` under an absl app (its handler prints INFO on stderr);
  elsewhere (a notebook, a test) absl hides INFO, so the line goes to stderr directly."""
  if absl_flags.FLAGS.is_parsed():
    logging.info("%s", message)
  else:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


class OnEval(Protocol):
  """``on_eval(record)``: called on the host with each evaluation's record (an entry of ``FitResult.history``)."""

  def __call__(self, record: dict, /) -> Any: ...


@dataclasses.dataclass(frozen=True, eq=False)
class _Run:
  """What one :func:`fit` call holds fixed while it trains: the run, its data and its resources (the stream's
  reader and the checkpoints are I/O handles). What changes from step to step is passed and returned: the
  device state (:class:`~ultr_jax.train.TrainState`) and the host's :class:`_Progress`."""

  name: str
  method: Method
  config: ml_collections.ConfigDict
  seeds: tuple[int, ...]
  valid: Optional[RankingDataset]
  on_eval: Optional[OnEval]
  replicated: jax.sharding.Sharding  # the state's sharding, and that of the batch indices put on the devices
  train: Optional[RankingDataset] = None  # the in-memory training lists (for divergence reports)
  layout: Optional[TrainLayout] = None
  stream: Optional[StreamReader] = None
  ckpt: Optional[Checkpointer] = None
  fingerprint: Optional[dict] = None

  def say(self, message: str) -> None:
    if self.config.progress:
      _progress(f"[{self.name}] {message}")


class _Progress(NamedTuple):
  """The host side of the loop's state, returned by every piece that changes it."""

  history: tuple[dict, ...]  # one record per evaluation
  diverged: np.ndarray  # bool [S]: the seed's loss or parameters went non-finite
  total: int  # the step the run ends at (config.steps, or where the stream ended)


def _check_config(config: ml_collections.ConfigDict, click_fn: Optional[ClickFn]) -> None:
  """Refuses an unknown ``on_divergence`` or ``display``, and a model-ordered display without a click_fn."""
  if config.on_divergence not in ON_DIVERGENCE:
    raise ValueError(f"config.on_divergence: unknown {config.on_divergence!r}; expected one of {ON_DIVERGENCE}")
  if config.on_corrupt_checkpoint not in ON_CORRUPT:
    raise ValueError(
      f"config.on_corrupt_checkpoint: unknown {config.on_corrupt_checkpoint!r}; expected one of {ON_CORRUPT}"
    )
  display = str(config.display)
  if display not in DISPLAYS:
    raise ValueError(f"config.display: unknown {display!r}; expected one of {DISPLAYS}")
  if display != "logged" and click_fn is None:
    raise ValueError(
      f"config.display={display!r} shows the lists as the ranker being trained orders them, so "
      "the clicks must be simulated on that order: it needs a click_fn (logged clicks were made "
      "on the logged order)"
    )


def _open_checkpoints(name: str, config: ml_collections.ConfigDict, workdir: str) -> Checkpointer:
  """Opens ``workdir/checkpoints/<name>`` (deleted first with ``restart``)."""
  ckpt_dir = os.path.join(os.path.abspath(workdir), "checkpoints", name)
  if config.restart and os.path.isdir(ckpt_dir):
    shutil.rmtree(ckpt_dir)
    shutil.rmtree(ckpt_dir + ".corrupt", ignore_errors=True)  # the unreadable steps set aside, if any
    if config.progress:
      _progress(f"[{name}] restart: deleted the checkpoints in {ckpt_dir}")
  return Checkpointer(ckpt_dir, max_to_keep=int(config.max_to_keep))


def _resume(run: _Run, state: TrainState, progress: _Progress, sharding) -> tuple[TrainState, _Progress]:
  """The run's latest checkpoint restored when its fingerprint matches the run's (another run's checkpoint is
  refused); the state and progress as they are when there is none."""
  assert run.ckpt is not None and run.fingerprint is not None
  restored = restore_checkpoint(
    run.ckpt,
    state,
    run.fingerprint,
    max_step=progress.total,
    name=run.name,
    on_corrupt=str(run.config.on_corrupt_checkpoint),
  )
  if restored is None:
    return state, progress
  step, state, meta = restored
  state = jax.device_put(state, sharding)
  progress = progress._replace(
    history=tuple(meta.get("history", [])),
    diverged=np.asarray(meta.get("diverged", progress.diverged.tolist()), bool),
  )
  if run.stream is not None:
    run.stream.resume(step, meta.get("stream_state"))
  run.say(f"resumed from step {step}")
  return state, progress


def _save(run: _Run, state: TrainState, progress: _Progress) -> None:
  if run.ckpt is not None:
    meta = {"history": list(progress.history), "fingerprint": run.fingerprint, "diverged": progress.diverged.tolist()}
    if run.stream is not None:
      meta["stream_state"] = run.stream.consumed_state
    run.ckpt.save(int(host(state.step)), state, meta)


def _validate(run: _Run, state: TrainState, diverged: np.ndarray) -> tuple[TrainState, Optional[dict]]:
  """Validation metrics of the current params (None without ``valid``); each seed's best state updated."""
  if run.valid is None:
    return state, None
  cutoffs = tuple(sorted(set(DEFAULT_CUTOFFS) | {10}))
  batch_size = int(run.config.eval_batch_size)
  m = evaluate(run.method, local(state.params), run.valid, cutoffs=cutoffs, batch_size=batch_size)
  select = run.config.select_metric
  if select not in m:
    raise ValueError(f"select_metric {select!r} not among {sorted(m)}")
  check_selection_metric(m[select], select, seeds=run.seeds, diverged=diverged)  # never a NaN "best"
  return update_best(state, jax.device_put(np.asarray(m[select], np.float32), run.replicated)), m


def _check_finite(run: _Run, state: TrainState, diverged: np.ndarray, means: dict, step: int, diagnoses: list):
  """The seeds marked diverged after this evaluation (``bool[S]``); with on_divergence="raise", an error for a
  seed whose loss or parameters are not finite, naming the step, the batch and the input field or parameter that
  went non-finite first."""
  loss = np.asarray(means["loss"], np.float64).reshape(len(run.seeds), -1)
  bad = ~np.isfinite(loss).all(-1) | ~host(finite_params(state.params))
  if not bad.any():
    return diverged
  which = [run.seeds[i] for i in np.flatnonzero(bad)]
  leaves = jax.tree_util.tree_leaves_with_path(host(state.params))
  nonfinite = [jax.tree_util.keystr(p) for p, x in leaves if x.dtype.kind == "f" and not np.isfinite(x).all()]
  in_memory = run.train is not None and jax.process_count() == 1
  cause = divergence_cause(
    first_nonfinite(diagnoses),
    nonfinite_params=nonfinite,
    train=run.train if in_memory else None,
    layout=run.layout if in_memory else None,
  )
  if run.config.on_divergence == "raise":
    if run.ckpt is not None:
      run.ckpt.close()  # the last good checkpoint stays; the diverged state is not saved
    raise FloatingPointError(
      f"[{run.name}] diverged at step {step}: seed(s) {which} have a non-finite loss "
      f"({np.asarray(means['loss']).tolist()}) or parameters. {cause} Or set on_divergence='mark' to keep "
      "going and mark those seeds"
    )
  new = bad & ~diverged
  if new.any():
    run.say(f"step {step}: seed(s) {[run.seeds[i] for i in np.flatnonzero(new)]} diverged (marked). {cause}")
  return diverged | bad


def _evaluation(
  run: _Run, state: TrainState, progress: _Progress, step: int, means: dict, rate: float, diagnoses: list
) -> tuple[TrainState, _Progress]:
  """The evaluation at ``step``: the divergence check, validation, the history record (and ``on_eval``)."""
  diverged = _check_finite(run, state, progress.diverged, means, step, diagnoses)
  state, m = _validate(run, state, diverged)
  record = {"step": step, **{f"train/{k}": np.asarray(v).tolist() for k, v in means.items()}}
  if m is not None:
    record.update({f"valid/{k}": np.asarray(v).tolist() for k, v in m.items()})
  if diverged.any():
    record["diverged"] = diverged.tolist()
  if run.on_eval is not None:
    run.on_eval(record)
  msg = f"step {step}/{progress.total} loss {np.mean(means['loss']):.4f}"
  if m is not None:
    msg += f" valid {run.config.select_metric} {np.mean(m[run.config.select_metric]):.4f}"
  run.say(msg + f" ({rate:.1f} steps/s)")
  return state, progress._replace(history=(*progress.history, record), diverged=diverged)


def _steps_per_call(config: ml_collections.ConfigDict) -> int:
  """The largest divisor of gcd(eval_every, checkpoint_every, progress_every) up to ``config.steps_per_call``."""
  eval_every = max(1, int(config.eval_every))
  periods = [eval_every, int(config.checkpoint_every) or eval_every]
  periods += [int(config.progress_every)] if config.progress_every else []
  period = functools.reduce(math.gcd, periods)
  return max(d for d in range(1, min(period, max(1, int(config.steps_per_call))) + 1) if period % d == 0)


def _next_call(run: _Run, total: int, step: int, per_call: int) -> tuple[Any, int, int]:
  """The next call's batches (indices ``[K, S, B]`` or a streamed chunk), how many of its steps are live, and the
  run's last step (earlier than ``total`` where the stream ended)."""
  n = min(per_call - step % per_call, total - step)
  if run.stream is None:
    assert run.layout is not None
    layout = run.layout
    idx = np.stack([layout.indices(step + min(j, n - 1)) for j in range(per_call)])
    return jax.device_put(idx, run.replicated), n, total  # explicitly: the step transfers nothing implicitly
  idx, got = run.stream.next_chunk()
  if got < n:  # the stream ended: train on what it gave, evaluate and save, then stop
    n, total = got, step + got
  return idx, n, total


def _train_loop(
  run: _Run, state: TrainState, progress: _Progress, data, train_steps: TrainSteps
) -> tuple[TrainState, _Progress, int]:
  """Trains from the state's step to ``progress.total`` (or the stream's end, or early stopping):
  ``(state, progress, step)``."""
  config = run.config
  step = int(host(state.step))
  eval_every = max(1, int(config.eval_every))
  ckpt_every = int(config.checkpoint_every) or eval_every
  progress_every = int(config.progress_every or 0)
  per_call = _steps_per_call(config)
  loss_acc, loss_n, diagnoses = None, 0, []
  t0, s0 = time.perf_counter(), step
  if run.stream is not None:
    run.stream.start(step, progress.total, per_call, max(1, int(config.prefetch)))
  while step < progress.total:
    idx, n, total = _next_call(run, progress.total, step, per_call)
    progress = progress._replace(total=total)
    if n == 0 and loss_n == 0:
      break
    live = jax.device_put(np.arange(per_call) < n, run.replicated)
    state, sm, diagnosis = train_steps(state, data, idx, live)
    diagnoses.append((step, diagnosis))
    if run.stream is not None:
      run.stream.refill(after=sm)  # while the devices compute (dispatch is asynchronous)
    step += n
    loss_acc = sm if loss_acc is None else jax.tree.map(jnp.add, loss_acc, sm)
    loss_n += n
    at_eval = step % eval_every == 0 or step == total
    rate = (step - s0) / max(time.perf_counter() - t0, 1e-9)  # includes the first step's compile
    if progress_every and step % progress_every == 0 and not at_eval:
      run.say(f"step {step}/{total} ({rate:.2f} steps/s, ~{(total - step) / rate:.0f}s left)")
    if at_eval:
      means = host(jax.tree.map(lambda v: v / loss_n, loss_acc))
      state, progress = _evaluation(run, state, progress, step, means, rate, diagnoses)
      loss_acc, loss_n, diagnoses = None, 0, []
    if step % ckpt_every == 0 or step == total:
      _save(run, state, progress)
    if at_eval and run.valid is not None and config.patience > 0:
      if bool(np.all(host(state.evals_since_best) >= config.patience)):
        _save(run, state, progress)
        break
  return state, progress, step


def _result(run: _Run, state: TrainState, progress: _Progress, step: int) -> FitResult:
  """Closes the checkpoints and the stream and reads the result off the devices."""
  if run.ckpt is not None:
    run.ckpt.close()
  if run.stream is not None:
    run.stream.close()
  state = host(state)
  num_seeds = len(run.seeds)
  if run.valid is None:
    params, extra = state.params, state.extra
    best_step = np.full((num_seeds,), step, np.int64)
    best_metric = np.full((num_seeds,), np.nan)
  else:
    params, extra = state.best_params, state.best_extra
    best_step, best_metric = np.asarray(state.best_step), np.asarray(state.best_metric)
  return FitResult(
    params=params,
    extra=extra,
    history=list(progress.history),
    best_step=best_step,
    best_metric=best_metric,
    final_params=state.params,
    diverged=progress.diverged.copy(),
    fingerprint=run.fingerprint,
    seeds=list(run.seeds),
  )


def fit(
  method: Method,
  train: RankingDataset,
  valid: Optional[RankingDataset] = None,
  *,
  click_fn: Optional[ClickFn] = None,
  config: Optional[ml_collections.ConfigDict] = None,
  seeds: Sequence[int] = (0,),
  workdir: Optional[str] = None,
  name: Optional[str] = None,
  on_eval: Optional[OnEval] = None,
) -> FitResult:
  """Trains ``method`` on ``train`` for ``len(seeds)`` independent runs at once.

  The training lists are sharded over the devices (each holds 1/N of them) and the batches drawn as
  ``config.data_shards`` says; N devices, or several processes, train as one (see
  :func:`~ultr_jax.train.maybe_initialize_distributed`).

  Args:
    method: the method to train.
    train: training lists (their extras travel into every batch); in a multi-process run, this process's
      queries (``sharding.process_query_range``). Or a stream: an iterable of batches,
      dicts of NumPy arrays ``[B, L]`` / ``[B, L, F]`` in the library's layout (``where``, ``features``,
      ``clicks``, ...; the same keys and shapes every time), one per step, the same for every seed
      (``config.batch_size`` and ``data_shards`` do not apply; with several processes, each yields its part of
      the batch). ``steps_per_call`` batches are stacked and put on the devices (sharded over the batch
      axis) ``config.prefetch`` chunks ahead of the compute. If the stream (or its iterator) has
      ``get_state()`` / ``set_state(state)`` (JSON-able states, e.g. a Grain iterator), its position after
      the last batch trained on is saved in each checkpoint and restored on resume; otherwise a resumed run
      skips as many batches as it has trained on. Training stops early where the stream ends.
    valid: validation lists for model selection; None keeps the final state.
    click_fn: ``click_fn(key, batch) -> dict`` merged into the batch inside
      the jitted step (fresh clicks every step); None when ``train`` already
      carries logged ``clicks``.
    config: see :func:`default_train_config`.
    seeds: one run per seed (vmapped): initialisation, clicks, batch order.
    workdir: if given, checkpoints go to ``workdir/checkpoints/<name>`` and
      training resumes from the latest one found there, if it was written by
      the same run (its :func:`run_fingerprint` matches; else ``ValueError``
      naming what differs, unless ``config.restart`` deletes it).
    name: the run's name (default ``method.name``) for progress and paths.
    on_eval: called on the host with every evaluation's record as it is made
      (the dict appended to :attr:`FitResult.history`: ``step``, ``train/<metric>``
      and ``valid/<metric>`` per seed), e.g. to send it to TensorBoard or
      wandb, or to append it to a JSON-lines file; records restored from a
      checkpoint are not replayed.

  Returns:
    A :class:`FitResult`.

  Raises:
    ValueError: an unknown config key; a checkpoint of another run in ``workdir``; an unreadable newest
      checkpoint with ``config.on_corrupt_checkpoint="raise"`` (with ``"fallback"``, the default, it is set
      aside with a warning and the newest readable one is resumed).
    FloatingPointError: the loss or parameters went non-finite (``config.on_divergence="raise"``); the message
      names the step, the batch and the input field or parameters that went non-finite first.
    ultr_jax._workdir.WorkdirLockedError: another live run holds ``workdir`` (its ``IN_PROGRESS``).

  Logged clicks (here the labels >= 2 as perfect clicks), two seeds at once:

  >>> import dataclasses
  >>> from ultr_jax import data
  >>> from ultr_jax.train import get_method
  >>> splits = data.make_synthetic(num_train=32, num_valid=8, num_test=8, list_size=5, num_features=4)
  >>> train = dataclasses.replace(splits.train, extras={"clicks": (splits.train.labels >= 2).astype(np.float32)})
  >>> config = default_train_config()
  >>> config.steps, config.batch_size, config.eval_every, config.progress = 4, 8, 2, False
  >>> m = get_method("naive", {"ranker": "linear"}, num_features=4, list_size=5)
  >>> seen = []  # on_eval: each evaluation's record as it is made (to a logger, a file, ...)
  >>> result = fit(m, train, splits.valid, config=config, seeds=(0, 1), on_eval=seen.append)
  >>> result.best_step.shape, [h["step"] for h in result.history], seen == result.history
  ((2,), [2, 4], True)
  """
  config = with_defaults(config)
  validate_train_config(config)  # every value in range (train/schema.py) before any work
  _check_config(config, click_fn)
  with workdir_lock.held(workdir):  # one run per workdir: another live run there is an error naming it
    return _fit(method, train, valid, click_fn, config, [int(s) for s in seeds], workdir, name, on_eval)


def _fit(method, train, valid, click_fn, config, seeds, workdir, name, on_eval) -> FitResult:
  """:func:`fit`'s body, under the workdir's lock."""
  name = name or method.name
  mesh = sharding_lib.make_mesh(config.num_devices or None)
  rep = sharding_lib.replicated(mesh)
  tx = method.optimizer if method.optimizer is not None else make_optimizer(config)
  seed_ids = np.asarray(seeds, np.uint32)
  stream, first = None, None
  if isinstance(train, RankingDataset):
    data, layout = place_train(train, mesh, config, list(seeds))
    idx0 = layout.indices(0)
  else:
    data, layout, stream = None, None, StreamReader(train, mesh)
    first = stream.peek()
    idx0 = jax.tree.map(lambda v: v[0], stream.put_one(first))
  state = create_train_state(method, tx, seed_ids, data, idx0, layout=layout, sharding=rep)
  train_steps = make_train_steps(
    method,
    tx,
    layout=layout,
    click_fn=click_fn,
    display=str(config.display),
    batch_sharding=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, sharding_lib.DATA_AXIS)),
  )
  fingerprint, ckpt = None, None
  if workdir is not None:
    if layout is not None:
      fingerprint = run_fingerprint(method, train, valid, click_fn=click_fn, config=config, seeds=list(seeds))
    else:
      assert first is not None
      fp_batch = {k: jnp.asarray(v) for k, v in first.items() if k != "qid"}
      fingerprint = make_fingerprint(method, fp_batch, stream_digest(train, first), valid, click_fn, config, seeds)
    ckpt = _open_checkpoints(name, config, workdir)
  in_memory = train if layout is not None else None
  run = _Run(name, method, config, tuple(seeds), valid, on_eval, rep, in_memory, layout, stream, ckpt, fingerprint)
  progress = _Progress(history=(), diverged=np.zeros((len(seeds),), bool), total=int(config.steps))
  if ckpt is not None:
    state, progress = _resume(run, state, progress, rep)
  state, progress, step = _train_loop(run, state, progress, data, train_steps)
  return _result(run, state, progress, step)
