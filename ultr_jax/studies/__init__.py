"""ultr_jax.studies: the paper reproductions and the report, one module (or folder) per study.

Nothing in the core library (``data``, ``simulation``, ``metrics``, ``graph``, ``losses``, ``models``,
``train``) imports this package or matplotlib; the studies import the core. Every study module exposes
``run(config, workdir) -> dict`` (the results it writes to ``workdir``: ``results.json``, Markdown/CSV
tables, figures), and the ones whose default config lives in the library ``default_config()``; the
binaries' configs are ``experiments/<study>/configs/default.py``.

========================  ==========================================================================
``STUDIES`` name          module
========================  ==========================================================================
``baselines``             :mod:`~ultr_jax.studies.baselines`: every baseline method under one click model
``click_models``          :mod:`~ultr_jax.studies.click_models`: click models fitted to session logs
``cld``                   :mod:`~ultr_jax.studies.cld`: CLD (Tables 2/3, Figures 3-6)
``identifiability``       :mod:`~ultr_jax.studies.identifiability`: Table 1, Figures 3a-6
``lbd``                   :mod:`~ultr_jax.studies.lbd`: LBD (Table 1, Figures 3/4)
``online``                :mod:`~ultr_jax.studies.online`: PDGD, DBGD, MGD, NSGD
``ope``                   :mod:`~ultr_jax.studies.ope`: off-policy estimators against the exact truth
``report``                :mod:`~ultr_jax.studies.report`: every method under every bias
``sif``                   :mod:`~ultr_jax.studies.sif`: SIF (its Tables 6-8)
========================  ==========================================================================

>>> from ultr_jax import studies
>>> sorted(studies.STUDIES)[:3]
['baselines', 'cld', 'click_models']
>>> studies.default_config("online").num_impressions
10000
"""

import importlib
from types import ModuleType
from typing import Any, Optional

import ml_collections

__all__ = ["STUDIES", "default_config", "get", "run"]

#: Study name -> its module (imported on first use).
STUDIES = {
  "baselines": "ultr_jax.studies.baselines",
  "click_models": "ultr_jax.studies.click_models",
  "cld": "ultr_jax.studies.cld",
  "identifiability": "ultr_jax.studies.identifiability",
  "lbd": "ultr_jax.studies.lbd",
  "online": "ultr_jax.studies.online",
  "ope": "ultr_jax.studies.ope",
  "report": "ultr_jax.studies.report",
  "sif": "ultr_jax.studies.sif",
}


def get(name: str) -> ModuleType:
  """The module of study ``name`` (a key of :data:`STUDIES`); raises ``ValueError`` naming the known ones.

  >>> get("lbd").__name__
  'ultr_jax.studies.lbd'
  """
  if name not in STUDIES:
    raise ValueError(f"unknown study {name!r}; expected one of {sorted(STUDIES)}")
  return importlib.import_module(STUDIES[name])


def run(name: str, config: ml_collections.ConfigDict, workdir: Optional[str]) -> dict[str, Any]:
  """Runs study ``name`` with ``config``, writing its results to ``workdir``; returns its results."""
  return get(name).run(config, workdir)


def default_config(name: str) -> ml_collections.ConfigDict:
  """The library's default config of study ``name``; raises ``ValueError`` where only the binary has one."""
  module = get(name)
  if not hasattr(module, "default_config"):
    raise ValueError(
      f"study {name!r} has no library default config; use experiments/{name}/configs/default.py (its get_config())"
    )
  return module.default_config()
