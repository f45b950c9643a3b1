r"""The since-2023 methods study's config: ``get_config()`` (the default) or ``get_config("smoke")``.

  python experiments/since2023/main.py --config=experiments/since2023/configs/default.py --workdir=/tmp/since2023
  # seconds-long variant used by the tests:
  python experiments/since2023/main.py --config=experiments/since2023/configs/default.py:smoke --workdir=/tmp/s23
  # one experiment only, more seeds:
  ... "--config.claims=('dr_vs_ips',)" --config.num_seeds=5

The default: 500/100/200 synthetic queries of 20 documents (32 features, labels from a random MLP), top 10
displayed, an MLP (32) relevance tower, 600 steps of batch 64, 3 seeds; the experiments and their settings are in
``ultr_jax.studies.configs.since2023``.
"""

from ultr_jax import studies


def get_config(arg: str = ""):
  return studies.default_config("since2023", arg or "default")
