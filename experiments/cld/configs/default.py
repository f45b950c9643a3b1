"""CLD study config: ``get_config()`` (the default grid) or ``get_config("smoke")``.

  python experiments/cld/main.py --config=experiments/cld/configs/default.py --workdir=/tmp/cld
  python experiments/cld/main.py --config=experiments/cld/configs/default.py:smoke --workdir=/tmp/cld_smoke

The default grid follows the paper's setting on synthetic data (20 Gaussian features, a fixed random
MLP as the true relevance, a linear production ranker fit on 1% of the training queries with all 20):
the learners see every feature the production ranker saw (``data.num_hidden = 0``). The paper's logs (Yahoo!/WEB10K, logging
ranker trained on the learners' features) have no hidden factor, and the issue's orderings
"IPS > Naive at k = 5, eta = 1", "Heckman-rank falls fastest as eta rises 0 -> 2" and "an assumed
eta > 1 hurts IPS more than CLD" are read on that grid (Table 2, the eta 0.1 twin and the k / eta /
sessions / noise / misspecified-eta sweeps). Spec 10.2's selection on unobservables is a second k
sweep, ``sweeps.k_hidden``: the same data, relevance function and production order, with the last
``data.num_hidden_sweep = 4`` of the 20 features hidden from the learners (they drive relevance and
the production ranker's selection but not the learners' scores). Its keys carry a ``hidden=4/``
prefix, e.g. ``hidden=4/k=2/eta=1.0/noise=0.1/sessions=100000``, and the ordering "CLD's gain over
IPS at k = 2 is larger than at k = 10" is read on it (and, for information, on the visible k
sweep too); ``orderings`` in ``results.json`` holds the four with seed-level intervals and a
boolean each. Naive and IPS train the paper's BPR on the shown (clicked, unclicked) pairs
(``method.loss_type = "pairwise"``, spec 5); ``--config.method.loss_type=listwise`` gives the softmax
baselines of the other studies. The generator draws ``num_features + num_hidden`` features; which of them the
learners see is the only difference between the two grids. With ``data.path`` the sweep hides the
last 4 of the file's features (``:paper`` turns it off, like the other sweeps).

Table 2 on real data (spec 10.3: k = 5, 1e5 sessions, 10% noise, eta = 1.0 and the printed 0.1, 5 seeds;
SVMlight train/valid/test files, queries without a relevant grade dropped, min-max fit on train):

  # MSLR-WEB10K fold 1
  python experiments/cld/main.py --config=experiments/cld/configs/default.py:paper \
      --config.data.path=/path/to/MSLR-WEB10K/Fold1 \
      --config.data.files="('train.txt','vali.txt','test.txt')" --workdir=/tmp/cld_web10k
  # Yahoo! LETOR set 1 (C14B)
  python experiments/cld/main.py --config=experiments/cld/configs/default.py:paper \
      --config.data.path=/path/to/ltrc_yahoo \
      --config.data.files="('set1.train.txt','set1.valid.txt','set1.test.txt')" --workdir=/tmp/cld_yahoo

``results.json`` then holds ``table2`` (eta = 1.0) and ``table2_eta0.1``; compare with spec 10.3
(+-0.02). The data path was exercised on ``../shared/data/letor-sample`` only (a 20-step pipeline
check), not on Yahoo!/WEB10K; cld_pair builds all L^2 pairs per list, so WEB10K's longest lists
(~1,250 documents) need a large memory or a smaller ``train.batch_size``.
"""

import ml_collections

from ultr_jax import studies


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  """The study's config ``arg`` (``""``: the default; else one of ``studies.variants("cld")``)."""
  return studies.default_config("cld", arg or "default")
