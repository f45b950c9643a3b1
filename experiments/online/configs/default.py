r"""Online LTR study config: ``get_config()`` (the default) or ``get_config("smoke")``.

  python experiments/online/main.py --config=experiments/online/configs/default.py --workdir=/tmp/online
  # seconds-long variant used by the tests:
  python experiments/online/main.py --config=experiments/online/configs/default.py:smoke \
      --workdir=/tmp/online_smoke
  # a neural ranker:
  ... --config.ranker=mlp --config.zero_init=False
  # the report's position-bias, trust-bias and DCM users (config.click_model_configs; any make_click_fn config):
  ... --config.click_models="('pbm','trust','dcm')"
  # MGD (or DBGD) with probabilistic multileaving instead of team-draft:
  ... --config.mgd.multileave=probabilistic
  # LETOR files (e.g. MSLR-WEB10K Fold1; graded 0-4), features normalised per query as the PDGD paper's data:
  ... --config.data.source=svmlight --config.data.train_path=Fold1/train.txt \
      --config.data.test_path=Fold1/test.txt --config.data.valid_path=Fold1/vali.txt --config.data.normalize=query_minmax

The default is the PDGD paper's protocol (Oosterhuis & de Rijke, CIKM'18) on the synthetic default
data: 1000 training queries of 20 candidates, the top 10 shown, 10,000 impressions, linear rankers
from w = 0, five seeds; PDGD (learning rate 0.1), DBGD (unit 1, step 0.01), MGD (9 candidates) and NSGD
(MGD's settings; the null space of the worst 25 of the last 60 losing directions, ties broken on 10
difficult queries of the last 50 impressions, as the NSGD authors' script) under the perfect, navigational
and informational cascade users.
"""

import ml_collections

from ultr_jax import studies


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  """The study's config ``arg`` (``""``: the default; else one of ``studies.variants("online")``)."""
  return studies.default_config("online", arg or "default")
