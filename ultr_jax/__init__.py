"""ultr_jax: unbiased learning to rank in JAX.

Subpackages (imported on first use, so ``import ultr_jax`` stays cheap):

* :mod:`ultr_jax.data`: ``RankingDataset``, SVMlight/LETOR and ULTRA loaders,
  preprocessing, the synthetic default, batching.
* :mod:`ultr_jax.simulation`: click models and logging policies.
* :mod:`ultr_jax.metrics`: ranking and click metrics.
* :mod:`ultr_jax.losses`: debiasing losses and estimators (rax convention).
* :mod:`ultr_jax.models`: flax linen towers.
* :mod:`ultr_jax.graph`: identifiability graph, node intervention and merging.
* :mod:`ultr_jax.evaluation`: off-policy evaluation of rankers from click logs
  (IPS-family, direct and doubly robust estimators, intervals, exact truth).
* :mod:`ultr_jax.train`: ``fit``, ``evaluate``, the method registry,
  checkpoints and results.
* :mod:`ultr_jax.studies`: the paper reproductions and the report
  (``run(config, workdir)`` each; the baselines study is ``train_and_evaluate``).

>>> import ultr_jax
>>> sorted(ultr_jax.train.available_methods())[:3]
['affine', 'cld', 'cld_n']
"""

import importlib
from typing import Any

__version__ = "0.2.0"

_SUBPACKAGES = (
  "data",
  "evaluation",
  "graph",
  "losses",
  "metrics",
  "models",
  "simulation",
  "studies",
  "testing",
  "train",
  "types",
)

# Shortcuts to the most used entry points: name -> submodule holding it.
_SHORTCUTS = {
  "RankingDataset": "data",
  "check_identifiability": "graph",
  "make_click_fn": "simulation",
  "get_method": "train",
  "available_methods": "train",
  "fit": "train",
  "evaluate": "train",
  "train_and_evaluate": "studies.baselines",
}

__all__ = ["__version__", *_SUBPACKAGES, *_SHORTCUTS]


def __getattr__(name: str) -> Any:
  if name in _SUBPACKAGES:
    return importlib.import_module(f"ultr_jax.{name}")
  if name in _SHORTCUTS:
    return getattr(importlib.import_module(f"ultr_jax.{_SHORTCUTS[name]}"), name)
  raise AttributeError(f"module 'ultr_jax' has no attribute {name!r}")


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(__all__))
