r"""Default config of the LBD study (spec-lbd 5.2: synthetic data, eta sweep 0..0.6, both rankers).

  python experiments/lbd/main.py --config=experiments/lbd/configs/default.py --workdir=/tmp/lbd
  # seconds-long variant used by the tests:
  python experiments/lbd/main.py --config=experiments/lbd/configs/default.py:smoke --workdir=/tmp/lbd_smoke
  # Yahoo!/Istella-S SVMlight files (crux features by the documented importance unless given):
  ... --config.data.source=svmlight --config.data.train_path=.../train.txt \
      --config.data.valid_path=.../vali.txt --config.data.test_path=.../test.txt \
      --config.data.normalize=minmax_pm1 --config.data.crux_indices='(635, 374, 444, 593, 380, 15, 124, 448, 416, 479)'

Sizing (measured 2026-11-24 on the shared 2-core machine, idle): every (ranker, method) cell
is ONE fit over all its etas (stacked runs); each ranker's (lambda, t) grid (21 members x 3 seeds
per eta) is split into jobs of ``grid_etas_per_job`` etas so the ``workers`` threads share it. The
default (4 etas) takes 11.8-13.8 min wall / 23-26 min CPU: the DNN grid jobs 395 s and 473 s, the Linear
ones 147 s and 125 s (two at a time), the 14 baseline cells 5-32 s each, within the 20-minute /
2-core target; the paper's 7-point sweep (``--config.etas='(0.0,0.1,0.2,0.3,0.4,0.5,0.6)'``) takes about
7/4 as long. Lambda is rescaled to the batch shape (spec 2.4, ``rescale_lambda``).
"""

import ml_collections

from ultr_jax import studies


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  """The study's config ``arg`` (``""``: the default; else one of ``studies.variants("lbd")``)."""
  return studies.default_config("lbd", arg or "default")
