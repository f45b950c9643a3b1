"""The training config of :func:`~ultr_jax.train.fit` (its fields and defaults) and the optimizer it names."""

from typing import Optional

import ml_collections
import optax

from ultr_jax.train.config import merge_config

__all__ = [
  "DEFAULT_CUTOFFS",
  "DISPLAYS",
  "NOT_FINGERPRINTED",
  "ON_DIVERGENCE",
  "default_train_config",
  "make_optimizer",
  "with_defaults",
]

DEFAULT_CUTOFFS = (1, 3, 5, 10)
DISPLAYS = ("logged", "model", "model_sample")


def default_train_config() -> ml_collections.ConfigDict:
  """Defaults of :func:`fit`; override any field in the config you pass.

  Returns:
    A new ``ConfigDict`` of the defaults.

  >>> c = default_train_config()
  >>> c.steps, c.batch_size, c.optimizer, c.display
  (2000, 64, 'adam', 'logged')
  >>> c.steps = 100  # then fit(method, train, config=c)
  """
  c = ml_collections.ConfigDict()
  c.steps = 2000
  c.batch_size = 64
  c.optimizer = "adam"
  c.learning_rate = 1e-3
  c.grad_clip = 0.0  # global-norm clipping; 0 disables it.
  c.eval_every = 200
  c.patience = 0  # evaluations without improvement before stopping; 0 = never.
  c.select_metric = "ndcg@10"
  c.checkpoint_every = 0  # steps between checkpoints; 0 = at every evaluation.
  c.max_to_keep = 2
  c.eval_batch_size = 512
  c.num_devices = 0  # devices in the data-parallel mesh; 0 = all.
  c.data_seed = 0  # batch order (combined with each run's seed).
  # How the batches are drawn and the training lists laid out on N devices. The lists are sharded over the
  # devices' data axis (each device holds 1/N of them, in strata padded with fully masked lists).
  # 0: one permutation of all queries per epoch (the historical sampler: the same batches on any number of
  #    devices and processes); on N > 1 devices each device gathers the batch's rows it holds and an exact
  #    reduce-scatter hands each device its block of the batch (one [B, L, F] exchange per step).
  # K > 0 (a multiple of N): K contiguous strata, B / K queries from each per step (B rounded up to a
  #    multiple of K), each stratum a permutation per epoch; every device gathers its block of the batch from
  #    the strata it holds, without communication. The batches depend on K, not on N.
  c.data_shards = 0
  # Several processes (jax.distributed): True, each passes fit only its own queries
  # (sharding.process_query_range); False, each passes the whole set and fit keeps its own queries of it.
  c.local_data = False
  # Streamed training (fit on an iterator of batches): chunks of steps_per_call batches put on the
  # devices ahead of the compute (jax.device_put is asynchronous).
  c.prefetch = 2
  c.progress = True
  c.progress_every = 0  # also print a progress line every this many steps (0: at evaluations only).
  # Train steps per jitted call (a lax.scan over the steps; 1 = one call per step). The count used is
  # the largest divisor of gcd(eval_every, checkpoint_every, progress_every) up to this, so every
  # evaluation, checkpoint and progress line falls where it would with one call per step; the
  # steps are the same. Fewer calls mean less dispatch and, on CPU, XLA allocates the step's
  # temporaries once per call rather than once per step.
  c.steps_per_call = 100
  # The order the simulated users see each training list in (with a click_fn): "logged" (as stored, the
  # logging policy's), "model" (the current ranker's, by score) or "model_sample" (a Plackett-Luce sample
  # of its scores): ULTRA's deterministic and stochastic online feeds.
  c.display = "logged"
  # Delete this run's checkpoints (workdir/checkpoints/<name>) and start over, instead of resuming; a
  # checkpoint of a different configuration is refused otherwise.
  c.restart = False
  # A non-finite loss or parameters at an evaluation: "raise" stops with an error; "mark" keeps going and
  # marks the seeds diverged (FitResult.diverged, the history's "diverged", results.json's "_diverged").
  c.on_divergence = "raise"
  # The newest checkpoint is unreadable (an emptied or truncated file): "fallback" reports it with its path,
  # moves it aside (checkpoints/<name>.corrupt/) and resumes from the newest readable one; "raise" stops.
  c.on_corrupt_checkpoint = "fallback"
  return c


ON_DIVERGENCE = ("raise", "mark")
# Fields that do not change what a run computes (output, speed, bookkeeping): left out of the fingerprint.
# ``steps`` is left out too, so a finished run can be extended; a checkpoint past ``steps`` is refused.
NOT_FINGERPRINTED = (
  "steps",
  "progress",
  "progress_every",
  "steps_per_call",
  "checkpoint_every",
  "max_to_keep",
  "eval_batch_size",
  "num_devices",
  "restart",
  "on_divergence",
  "on_corrupt_checkpoint",
  "prefetch",
  "local_data",
)


def with_defaults(config: Optional[ml_collections.ConfigDict]) -> ml_collections.ConfigDict:
  """``config`` laid over :func:`default_train_config` (an unknown key is a ``ValueError`` naming it).

  >>> with_defaults({"steps": 3}).steps
  3
  """
  return merge_config(default_train_config(), config, what="train config (fit)")


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """The optax optimizer named by ``config.optimizer`` (adam, adagrad, sgd, adamw).

  Args:
    config: the training config (``optimizer``, ``learning_rate`` and the optimizer's fields).

  Returns:
    The ``optax.GradientTransformation``.

  >>> tx = make_optimizer(default_train_config())
  >>> isinstance(tx, optax.GradientTransformation)
  True
  """
  builders = {"adam": optax.adam, "adagrad": optax.adagrad, "sgd": optax.sgd, "adamw": optax.adamw}
  if config.optimizer not in builders:
    raise ValueError(f"unknown optimizer {config.optimizer!r}; one of {sorted(builders)}")
  tx = builders[config.optimizer](config.learning_rate)
  if config.get("grad_clip", 0.0):
    tx = optax.chain(optax.clip_by_global_norm(config.grad_clip), tx)
  return tx
