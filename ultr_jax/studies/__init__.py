"""ultr_jax.studies: the paper reproductions and the report, one module (or folder) per study.

Nothing in the core library (``data``, ``simulation``, ``metrics``, ``graph``, ``losses``, ``models``,
``train``) imports this package or matplotlib; the studies import the core. Every study module exposes
``run(config, workdir) -> dict`` (the results it writes to ``workdir``: ``results.json``, Markdown/CSV
tables, figures), ``VARIANTS`` and ``default_config(variant="default")`` (its configs live in
:mod:`ultr_jax.studies.configs`, so an installed package runs every study; the binaries'
``experiments/<study>/configs/default.py`` return them).

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
``since2023``             :mod:`~ultr_jax.studies.since2023`: DR, safe DR/PRPO, disentangled two-towers, UPE,
                          two-tower identifiability, the loss-by-correction grid
========================  ==========================================================================

Beside them: :mod:`~ultr_jax.studies.configs` (every study's variants and value rules),
:mod:`~ultr_jax.studies.experiment` (the data configs and loaders the studies share),
:mod:`~ultr_jax.studies.tables` (summaries over seeds) and :mod:`~ultr_jax.studies.figures`.

>>> from ultr_jax import studies
>>> sorted(studies.STUDIES)[:3]
['baselines', 'cld', 'click_models']
>>> studies.default_config("online").num_impressions, studies.default_config("online", "smoke").num_impressions
(10000, 300)
"""

import importlib
from types import ModuleType
from typing import Any, Optional

import ml_collections

__all__ = ["STUDIES", "default_config", "get", "run", "validate_config", "variants"]

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
  "since2023": "ultr_jax.studies.since2023",
}


def get(name: str) -> ModuleType:
  """The module of study ``name`` (a key of :data:`STUDIES`); raises ``ValueError`` naming the known ones.

  Args:
    name: the study's name.

  Returns:
    Its module (``run``, ``VARIANTS``, ``default_config``, ``CONFIG_RULES``).

  >>> get("lbd").__name__
  'ultr_jax.studies.lbd'
  """
  if name not in STUDIES:
    raise ValueError(f"unknown study {name!r}; expected one of {sorted(STUDIES)}")
  return importlib.import_module(STUDIES[name])


def run(name: str, config: ml_collections.ConfigDict, workdir: Optional[str]) -> dict[str, Any]:
  """Runs study ``name`` with ``config``, writing its results to ``workdir``; returns its results.

  Args:
    name: a key of :data:`STUDIES`.
    config: the study's config (:func:`default_config`, fields changed as wished); its values are checked
      (:func:`validate_config`) before any work.
    workdir: the output directory (``results.json``, tables, figures).

  Returns:
    The results it wrote to ``results.json``.
  """
  return get(name).run(config, workdir)


def default_config(name: str, variant: str = "default") -> ml_collections.ConfigDict:
  """The config ``variant`` of study ``name`` (``"default"``, ``"smoke"``, or one of its ``VARIANTS``).

  Args:
    name: a key of :data:`STUDIES`.
    variant: one of the study's ``VARIANTS``; every study has ``"default"`` and ``"smoke"`` (seconds).

  Returns:
    A fresh, locked ``ml_collections.ConfigDict`` (``run(name, config, workdir)`` takes it): as in the
    binaries, setting a key it does not have is an error naming it (``with config.unlocked():`` adds one).

  Raises:
    ValueError: an unknown study or variant, naming the known ones.

  >>> sorted(default_config("sif", "t8").t8.methods)
  ['dla', 'ips', 'sif_exp', 'sif_position']
  >>> default_config("lbd", "smoke").num_seedz = 2
  Traceback (most recent call last):
  AttributeError: 'Key "num_seedz" does not exist and cannot be added since the config is locked. ...'
  """
  config = get(name).default_config(variant)
  config.lock()
  return config


def validate_config(name: str, config: ml_collections.ConfigDict) -> None:
  """Checks ``config``'s values against study ``name``'s ``CONFIG_RULES`` (what its ``run`` does first).

  Args:
    name: a key of :data:`STUDIES`.
    config: a config of the study (e.g. :func:`default_config` with fields changed).

  Raises:
    ValueError: the first field out of range, naming it, its value and the allowed values.

  >>> config = default_config("click_models", "smoke")
  >>> config.test_fraction = 1.5
  >>> validate_config("click_models", config)
  Traceback (most recent call last):
  ValueError: config.test_fraction: 1.5 is out of range; expected a number in (0, 1)
  """
  from ultr_jax import _schema  # noqa: PLC0415

  _schema.validate_config(config, get(name).CONFIG_RULES)


def variants(name: str) -> tuple[str, ...]:
  """The config variants of study ``name``, ``"default"`` first.

  Args:
    name: a key of :data:`STUDIES`.

  Returns:
    Its variant names (each one a ``default_config(name, variant)``).

  >>> variants("report")
  ('default', 'full', 'smoke')
  """
  return tuple(get(name).VARIANTS)
