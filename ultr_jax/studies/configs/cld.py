"""The CLD study's configs (Tables 2/3 and the sweeps of Figures 3-6 on synthetic data).

Variants: ``default`` (the grid), ``smoke`` (seconds) and ``paper`` (paper-size nets, Table 2 only, for
SVMlight data). The binary is ``experiments/cld/main.py``; its config file documents the commands.
"""

import ml_collections

from ultr_jax._schema import Rule, for_fields, integer, number, one_of, sequence, unknown_variant
from ultr_jax.studies.configs._shared import data_rules, train_rules
from ultr_jax.train import available_methods

__all__ = ["CONFIG_RULES", "VARIANTS", "default_config"]

VARIANTS = ("default", "smoke", "paper")


def default_config(variant: str = "default") -> ml_collections.ConfigDict:
  """The CLD study's config ``variant`` (one of :data:`VARIANTS`).

  >>> default_config().sweeps.k, default_config("smoke").sweeps.k
  ((2, 3, 5, 10, 20), (2, 3))
  """
  if variant not in VARIANTS:
    raise unknown_variant("cld", variant, VARIANTS)
  c = ml_collections.ConfigDict()
  c.num_seeds = 5  # training seeds (vmapped) on one fixed simulated log (A16)
  c.compilation_cache_dir = "jax_cache"  # persistent XLA cache under --workdir ("" off; absolute: shared)
  c.sim_seed = 41
  c.threshold = 2.0  # A1: released code binarises grade >= 2 (paper text: 3)
  c.logging_fraction = 0.01  # production ranker fit on 1% of the training queries
  c.eval_batch_size = 1024

  c.data = ml_collections.ConfigDict()
  c.data.path = ""  # SVMlight directory; empty = synthetic
  c.data.files = ("train.txt", "vali.txt", "test.txt")
  c.data.num_train = 1000
  c.data.num_valid = 10  # unused (final state is evaluated, as the released code does)
  c.data.num_test = 1000
  c.data.list_size = 20
  # The generator draws num_features + num_hidden features (20), all seen by the production ranker.
  c.data.num_features = 20  # observed by the learners on the main grid: all of them (the paper's setting)
  c.data.num_hidden = 0  # hidden from the learners on the main grid
  # Hidden from the learners (the last ones of the 20) in the k_hidden sweep: selection on
  # unobservables (a robustness sweep of ours, not the paper's). Its keys start with hidden=4/.
  c.data.num_hidden_sweep = 4
  c.data.label_noise = 0.5
  c.data.seed = 0

  # The paper's setting for Table 2: top-5, 1e5 sessions, 10% noise; eta = 1.0 and the printed 0.1 (A2).
  c.table2 = dict(k=5, eta=1.0, noise=0.1, sessions=100_000)
  c.table2_etas = (0.1,)
  c.sweeps = ml_collections.ConfigDict()
  c.sweeps.k = (2, 3, 5, 10, 20)
  c.sweeps.eta = (0.0, 0.5, 1.0, 2.0)
  c.sweeps.sessions = (1_000, 10_000, 100_000, 1_000_000)
  c.sweeps.noise = (0.0, 0.1, 0.3, 0.5)
  c.sweeps.misspec_k = (3, 5)
  c.sweeps.assumed_eta = (0.5, 1.0, 2.0)
  c.sweeps.k_hidden = (2, 3, 5, 10, 20)  # table2 with k varied, data.num_hidden_sweep features hidden
  # The acceptance orderings (results.json "orderings"): verdicts on `metric` (the other metrics are
  # reported alongside); Heckman-rank's drop from etas[0] to etas[1]; CLD's gain over IPS at ks[0]
  # minus at ks[1] (on the k_hidden sweep, and for information on the k sweep).
  c.orderings = ml_collections.ConfigDict()
  c.orderings.metric = "ndcg@1"
  c.orderings.etas = (0.0, 2.0)
  c.orderings.ks = (2, 10)
  c.methods = ("naive", "ips", "heckman_rank", "rank_agg", "cld", "cld_n", "cld_pair", "cld_pair_l", "oracle")
  c.misspec_methods = ("ips", "rank_agg", "cld", "cld_pair")

  c.train = ml_collections.ConfigDict()
  c.train.steps = 300
  c.train.batch_size = 64
  c.train.optimizer = "adam"
  c.train.learning_rate = 1e-2
  c.method = ml_collections.ConfigDict()
  c.method.gamma = 0.1  # A14 (untuned default)
  c.method.link = "probit"
  c.method.sq_weight = 1.0
  # Neural rankers (naive, ips, cld_n, cld_pair, oracle): ELU + dropout as the paper; the synthetic
  # grid uses a smaller net than the paper's (256, 128, 64) so the grid fits 20 minutes on 2 cores.
  c.method.ranker = "mlp"
  c.method.hidden_sizes = (64, 32)
  c.method.activation = "elu"
  c.method.layer_norm = False
  c.method.dropout = 0.1
  # Naive, IPS (and RankAgg's IPS part): the paper's BPR on (clicked, unclicked) pairs of the top-k
  # records, IPS weighting the clicked item by 1/rho (the paper's Section 6 baselines), each query's pairs weighted by its
  # sessions. "listwise" gives the softmax cross-entropy of the other studies instead.
  c.method.loss_type = "pairwise"
  c.overrides = {"cld": {"ranker": "linear"}, "cld_pair": {"ranker": "mlp"}}

  if variant == "smoke":
    c.num_seeds = 2
    c.data.num_train, c.data.num_test, c.data.list_size = 60, 40, 8
    c.data.num_features, c.data.num_hidden, c.data.num_hidden_sweep = 8, 0, 2
    c.logging_fraction = 0.2
    c.table2 = dict(k=3, eta=1.0, noise=0.1, sessions=2000)
    c.table2_etas = (0.1,)
    c.sweeps.k = (2, 3)
    c.sweeps.eta = (0.0, 2.0)
    c.sweeps.sessions = (2000,)
    c.sweeps.noise = (0.1,)
    c.sweeps.misspec_k = (3,)
    c.sweeps.assumed_eta = (2.0,)
    c.sweeps.k_hidden = (2, 3)
    c.orderings.ks = (2, 3)
    c.train.steps = 5
    c.train.batch_size = 16
    c.method.hidden_sizes = (8,)
  elif variant == "paper":  # the paper's Section 6 setting: paper-size nets, 12 epochs-ish, Table 2 only
    c.method.hidden_sizes = (256, 128, 64)
    c.method.dropout = 0.5
    c.learning_rate = 1e-3
    c.train.learning_rate = 1e-3
    c.train.batch_size = 128
    c.train.steps = 3000
    c.sweeps.k, c.sweeps.eta, c.sweeps.sessions, c.sweeps.noise = (), (), (), ()
    c.sweeps.misspec_k, c.sweeps.k_hidden = (), ()
  return c


#: The allowed values of the fields the study reads (:func:`~ultr_jax.studies.validate_config`).
_VARIANT_CONFIGS = [default_config(v) for v in VARIANTS]
CONFIG_RULES: dict[str, Rule] = {
  "num_seeds": integer(1),
  "sim_seed": integer(0),
  "logging_fraction": number(0, 1, lo_open=True),
  "eval_batch_size": integer(1),
  **for_fields(data_rules(), *_VARIANT_CONFIGS),
  "data.num_hidden": integer(0),
  "data.num_hidden_sweep": integer(0),
  "data.label_noise": number(0, 1),
  "table2.k": integer(1),
  "table2.eta": number(0),
  "table2.noise": number(0, 1),
  "table2.sessions": integer(1),
  "table2_etas": sequence(number(0)),
  "sweeps.k": sequence(integer(1)),
  "sweeps.eta": sequence(number(0)),
  "sweeps.sessions": sequence(integer(1)),
  "sweeps.noise": sequence(number(0, 1)),
  "sweeps.misspec_k": sequence(integer(1)),
  "sweeps.assumed_eta": sequence(number(0)),
  "sweeps.k_hidden": sequence(integer(1)),
  "orderings.etas": sequence(number(0), min_len=2),
  "orderings.ks": sequence(integer(1), min_len=2),
  "methods": sequence(one_of(*available_methods(), "oracle"), min_len=1),
  **for_fields(train_rules(), *_VARIANT_CONFIGS),
  "method.gamma": number(0),
  "method.link": one_of("probit", "logit"),
  "method.sq_weight": number(0),
  "method.ranker": one_of("linear", "mlp"),
  "method.hidden_sizes": sequence(integer(1)),
  "method.dropout": number(0, 1, hi_open=True),
  "method.loss_type": one_of("pairwise", "listwise"),
}
