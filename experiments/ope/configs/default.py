r"""Off-policy evaluation study config: ``get_config()`` (the default), ``get_config("grid")``, ``get_config("docs")``
or ``get_config("smoke")``.

  python experiments/ope/main.py --config=experiments/ope/configs/default.py --workdir=/tmp/ope
  # the run the docs page reports (10^3 to 10^5 sessions, logging temperatures 1, 0.2 and uniform):
  python experiments/ope/main.py --config=experiments/ope/configs/default.py:grid --workdir=/tmp/ope_grid
  # a shorter run (10^3 and 10^4 sessions, the same temperatures):
  python experiments/ope/main.py --config=experiments/ope/configs/default.py:docs --workdir=/tmp/ope_docs
  # seconds-long variant used by the tests:
  python experiments/ope/main.py --config=experiments/ope/configs/default.py:smoke --workdir=/tmp/ope_smoke
  # the number of clicks as the reward (DCG-discounted clicks by default), fewer replicates, only the DBN users:
  ... --config.reward_weights=clicks --config.num_replicates=30 "--config.users=('dbn',)"

The default: 100 queries of 5 documents, a logging ranker (labels plus Gaussian noise) shown by Plackett-Luce at
temperatures 0.2, 1, 5 and uniform; PBM, cascade and DBN users; 11 deterministic targets from the logging
ranker to the ideal one; logs of 10^3 to 10^6 sessions, 100 replicate logs each; the IPS family (standard,
independent, reward-interaction, pseudo-inverse, each also self-normalised) on every replicate, the direct
method, doubly robust and cascade doubly robust with a fitted PBM and DBN on 20 of them. The configs live in
the package (``ultr_jax.studies.configs.ope``).
"""

from ultr_jax import studies


def get_config(arg: str = ""):
  return studies.default_config("ope", arg or "default")
