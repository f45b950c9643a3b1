"""ultr_jax.losses: pure ULTR losses over ``[..., list_size]`` (rax convention).

One module per family; append your family's import block and ``__all__``
entries below (one block per module).
"""

__all__: list[str] = []

from ultr_jax.losses.naive import (  # noqa: E402
  lambdarank_weights,
  naive_pairwise_loss,
  naive_sigmoid_loss,
  naive_softmax_loss,
)

__all__ += ["lambdarank_weights", "naive_pairwise_loss", "naive_sigmoid_loss", "naive_softmax_loss"]

from ultr_jax.losses.ips import (  # noqa: E402
  ips_pairwise_loss,
  ips_sigmoid_loss,
  ips_softmax_loss,
  ips_weights,
  snips_sigmoid_loss,
  snips_softmax_loss,
  snips_weights,
)

__all__ += [
  "ips_pairwise_loss",
  "ips_sigmoid_loss",
  "ips_softmax_loss",
  "ips_weights",
  "snips_sigmoid_loss",
  "snips_softmax_loss",
  "snips_weights",
]

from ultr_jax.losses.affine import affine_sigmoid_loss, affine_softmax_loss, affine_targets  # noqa: E402

__all__ += ["affine_sigmoid_loss", "affine_softmax_loss", "affine_targets"]

from ultr_jax.losses.dla import dla_loss, dla_weights  # noqa: E402

__all__ += ["dla_loss", "dla_weights"]

from ultr_jax.losses.em import em_posteriors, em_propensity_update, regression_em_loss  # noqa: E402

__all__ += ["em_posteriors", "em_propensity_update", "regression_em_loss"]

from ultr_jax.losses.two_tower import two_tower_log_probs, two_tower_loss  # noqa: E402

__all__ += ["two_tower_log_probs", "two_tower_loss"]

from ultr_jax.losses.pairwise import (  # noqa: E402
  click_pairs,
  pairwise_debiasing_loss,
  pairwise_debiasing_update,
)

__all__ += ["click_pairs", "pairwise_debiasing_loss", "pairwise_debiasing_update"]

from ultr_jax.losses.cld import (  # noqa: E402
  borda_scores,
  cld_log_cdf,
  cld_loss,
  cld_pair_loss,
  heckman_loss,
  inverse_mills_ratio,
)

__all__ += ["borda_scores", "cld_log_cdf", "cld_loss", "cld_pair_loss", "heckman_loss", "inverse_mills_ratio"]

from ultr_jax.losses.sif import (  # noqa: E402
  bias_likelihood_loss,
  binary_entropy,
  cell_marginals,
  conditional_mi_binary,
  doubly_robust_risk,
  dr_targets,
  dual_ascent_update,
  effective_sample_size,
  ips_targets,
  listwise_risk,
  oracle_leakage,
  project_within_cells,
)

__all__ += [
  "bias_likelihood_loss",
  "binary_entropy",
  "cell_marginals",
  "conditional_mi_binary",
  "doubly_robust_risk",
  "dr_targets",
  "dual_ascent_update",
  "effective_sample_size",
  "ips_targets",
  "listwise_risk",
  "oracle_leakage",
  "project_within_cells",
]

from ultr_jax.losses.vectorization import base_vector, observation_density_loss, vectorization_scores  # noqa: E402

__all__ += ["base_vector", "observation_density_loss", "vectorization_scores"]

from ultr_jax.losses.click_model import (  # noqa: E402
  CLICK_MODEL_LOSSES,
  click_model_bias_shapes,
  click_model_click_logits,
  click_model_log_likelihood_from_logits,
  click_model_loss,
)

__all__ += [
  "CLICK_MODEL_LOSSES",
  "click_model_bias_shapes",
  "click_model_click_logits",
  "click_model_log_likelihood_from_logits",
  "click_model_loss",
]

from ultr_jax.losses.pdgd import pdgd_loss, pdgd_pair_weights  # noqa: E402

__all__ += ["pdgd_loss", "pdgd_pair_weights"]
