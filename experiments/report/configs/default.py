r"""Config of the one-report study: every method under every simulated bias.

  python experiments/report/main.py --config=experiments/report/configs/default.py --workdir=/tmp/report
  # with SIF's channel ablations (sif_lambda0, sif_exp, sif_dec) and the methods since 2023 (dr_ltr, safe_dr, prpo,
  # two_tower_disentangled, two_tower_weighted, upe; their papers' claims: experiments/since2023) too:
  python experiments/report/main.py --config=experiments/report/configs/default.py:full --workdir=/tmp/report
  # the online learners under the same users (as columns online_pdgd, ...), alone or beside the others:
  ... --config.online.methods="('pdgd','mgd','dbgd')" [--config.methods="()"]
  # seconds-long variant used by the tests:
  python experiments/report/main.py --config=experiments/report/configs/default.py:smoke --workdir=/tmp/rs

Data and logging policy are the baselines study's (synthetic, 1% labelled logging ranker, top 10
displayed). Each bias is a click model of ``ultr_jax.simulation`` (``click_model`` is passed to
``make_click_fn``, or to ``make_position_trust_click_fn`` for ``position_trust``); ``selection="topk"``
keeps every candidate in the training lists, of which the click model shows only the top ``top_k``.
Any field can be overridden, e.g. ``--config.methods="('naive','dla')"`` or
``--config.biases="('pbm','topk')"``.
"""

import ml_collections

from ultr_jax import studies


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  """The study's config ``arg`` (``""``: the default; else one of ``studies.variants("report")``)."""
  return studies.default_config("report", arg or "default")
