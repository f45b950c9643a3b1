"""The identifiability study's configs (Chen et al., ICML 2024: Table 1, Figures 3a-6, fully synthetic).

Variants: ``default`` (the paper's sizes) and ``smoke`` (seconds). The binary is
``experiments/identifiability/main.py``.
"""

import ml_collections

from ultr_jax._schema import Rule, integer, number, one_of, sequence, unknown_variant

__all__ = ["CONFIG_RULES", "VARIANTS", "default_config"]

VARIANTS = ("default", "smoke")


def default_config(variant: str = "default") -> ml_collections.ConfigDict:
  """The identifiability study's config ``variant`` (one of :data:`VARIANTS`).

  Args:
    variant: one of :data:`VARIANTS`: ``"default"`` or ``"smoke"`` (seconds).

  Returns:
    A fresh ``ml_collections.ConfigDict``.

  >>> default_config().runs, default_config("smoke").runs
  (10, 2)
  """
  if variant not in VARIANTS:
    raise unknown_variant("identifiability", variant, VARIANTS)
  c = ml_collections.ConfigDict()
  c.seed = 0
  # "" = the embedded generator (design graphs K = 1..4); else an ULTRA dir.
  c.data = ""
  # Directory with K=1..K=4 ULTRA datasets for the figures ("" = generator).
  c.data_root = ""
  c.runs = 10
  c.num_clicks = 1e6
  # The fits' precision (Table 1, the figures, the context study): "float64" (the paper's numbers; click MSE
  # goes below float32 rounding) or "float32" (native on TPUs; measured against Table 1 on the study page).
  c.dtype = "float64"
  c.epochs = ml_collections.ConfigDict({"dla": 20_000, "regression_em": 100_000, "two_tower": 20_000})
  c.dla_o_update = "mean_ratio"  # the authors' code: Gauss-Seidel, mean-of-ratios o' (the paper: exact argmins)
  c.rem_variant = "repo"  # the authors' code: the E-step plugs in ctr / o'(t), not the paper's r'_{k-1}(x)
  c.click_grid = (1e3, 1e4, 1e5, 1e6)  # Figures 3a and 4a
  c.figures = ("3a", "3b", "4a", "4b", "6")
  c.figure_epochs = 20_000  # DLA epochs of the figure runs
  # JAX's persistent XLA cache under --workdir ("" off; absolute: shared).
  # A re-run skips Table 1's compiles.
  c.compilation_cache_dir = "jax_cache"
  # Generator sizes (the paper's).
  c.gen = ml_collections.ConfigDict({"block_size": 1000, "num_queries": 1150, "borrow": 50})
  # The context-dependent study (Section 5.2) on synthetic LETOR data (or an
  # SVMlight file whose line order is the logged ranking).
  c.context = ml_collections.ConfigDict(
    {
      "enabled": True,
      "svmlight": "",
      "num_contexts": (1, 20, 200, 1000),
      "num_queries": 2000,
      "num_docs": 5000,
      "epochs": 100,
      "two_tower_epochs": 2000,
      "runs": 1,
    }
  )
  if variant == "smoke":
    c.runs = 2
    c.epochs = ml_collections.ConfigDict({"dla": 200, "regression_em": 200, "two_tower": 200})
    c.figure_epochs = 200
    c.click_grid = (1e4, 1e6)
    c.context.num_contexts = (1, 50)
    c.context.num_queries = 100
    c.context.num_docs = 300
    c.context.two_tower_epochs = 100
    c.gen = ml_collections.ConfigDict({"block_size": 60, "num_queries": 100, "borrow": 5})
  return c


#: The allowed values of the fields the study reads (:func:`~ultr_jax.studies.validate_config`).
CONFIG_RULES: dict[str, Rule] = {
  "seed": integer(0),
  "runs": integer(1),
  "num_clicks": number(1),
  "dtype": one_of("float64", "float32"),
  "epochs.*": integer(1),
  "click_grid": sequence(number(1)),
  "figures": sequence(one_of("3a", "3b", "4a", "4b", "6")),
  "figure_epochs": integer(1),
  "gen.block_size": integer(1),
  "gen.num_queries": integer(1),
  "gen.borrow": integer(0),
  "context.num_contexts": sequence(integer(1)),
  "context.num_queries": integer(1),
  "context.num_docs": integer(1),
  "context.epochs": integer(1),
  "context.two_tower_epochs": integer(1),
  "context.runs": integer(1),
}
