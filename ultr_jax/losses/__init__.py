r"""ultr_jax.losses: pure ULTR losses over ``[..., list_size]`` (rax convention).

**One calling convention** for every loss::

    loss = fn(scores, clicks_or_labels, *, where=None, weights=None, reduce_fn=jnp.mean, **named_inputs)

* ``scores``: ``[..., L]`` the ranker's logits (the prediction always comes
  first; :func:`bias_likelihood_loss` takes predicted click probabilities,
  :func:`observation_density_loss` a density's means ``[..., L, d]``,
  :func:`doubly_robust_risk` per-sample losses);
* ``clicks_or_labels``: ``[..., L]`` clicks, click-through rates, targets or labels (the observation vectors
  ``[..., L, d]`` a density is fitted to; the observed exposure of :func:`doubly_robust_risk`);
* ``where``: ``bool[..., L]`` valid items; ``weights``: ``[..., L]`` per-item weights;
* ``reduce_fn``: any reduction ``f(values, where=...)``: a mean (``jnp.mean``
  or anything that computes the masked mean: over items, lists or pairs, or per
  unit of mass where the family says so; an all-masked mean is 0, rax's
  ``safe_reduce``), ``jnp.sum``, any other reduction, or None for the
  per-item / per-list / per-pair values (whose ``jnp.sum`` is the
  ``reduce_fn=jnp.sum`` loss). All go through one helper, ``_utils.reduce_loss``.
* multi-part losses return ``(loss, aux)`` with an ``aux`` dict of the parts
  when called with ``return_aux=True`` (:func:`dla_loss`, :func:`heckman_loss`, :func:`doubly_robust_risk`).

**Named extra inputs** (keyword-only, the same name in every family):

=================================  ==============================================================
``propensities``                   examination probabilities :math:`\theta_i` at each item's position (IPS, SNIPS,
                                   affine, Regression-EM, CLD, SIF's DR risk)
``observation_logits``             the bias / observation tower's logits (DLA, two-tower, LBD)
``selection_scores``               the selection model's index :math:`f_\omega(x)` (CLD, CLD-pair, Heckman)
``positions``                      ``int[..., L]`` 0-based displayed positions (PDGD, the estimators' updates)
``shown``                          ``bool[..., L]`` the items a top-k log displayed (CLD, Heckman)
``eps_plus/eps_minus``             trust-bias click probabilities (affine)
``t_plus/t_minus``                 PairD's bias ratios per item
``imputed``                        a doubly robust estimator's imputed values :math:`m(X, K)` (SIF's DR risk)
``log_var``                        log-variances :math:`v` of a Gaussian prediction (Vectorization's observation density)
``alpha_bar/beta_bar``             expected affine treatments of a document under the logging policy (doubly robust LTR)
``logging_exposure``               the logging policy's expected DCG exposure of each item (safe DR, PRPO)
``gumbel_noise``                   ``[..., S, L]`` standard Gumbel noise for ``S`` sampled Plackett-Luce rankings
``adversary_logits``               an adversarial head's predictions of the relevance logits (disentangled two-tower)
``permuted_observation_logits``    ``[..., P, L]`` a propensity model's logits over ``P`` document permutations (UPE)
``max_weight``                     cap of every inverse-propensity-style weight; None means
                                   :data:`DEFAULT_MAX_WEIGHT` (``1e8``, far above any weight of the
                                   expected-metrics runs), ``math.inf`` no cap
=================================  ==============================================================

**Numerics**: with the default cap, propensities down to :math:`10^{-30}` and scores of
:math:`\pm 10^{30}` give finite losses and gradients (CLD and Heckman bound their scores at
:math:`\pm 10^{15}` before a square or a probit link).

**Stateful estimators** (Regression-EM's propensities, PairD's ratios, SIF's dual
ascent) are optax-style ``(init, update)`` pairs (:class:`Estimator`), never state
hidden in a loss.
"""

# One module per family: a new family adds its import block and ``__all__`` entries below (one block per module).

__all__: list[str] = []

from ultr_jax.losses._utils import DEFAULT_MAX_WEIGHT  # noqa: E402
from ultr_jax.losses.estimator import Estimator  # noqa: E402
from ultr_jax.losses.registry import LOSSES, LossSpec, register_loss  # noqa: E402

__all__ += ["DEFAULT_MAX_WEIGHT", "Estimator", "LOSSES", "LossSpec", "register_loss"]

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

from ultr_jax.losses.dla import dla_loss, dla_propensities, dla_weights  # noqa: E402

__all__ += ["dla_loss", "dla_propensities", "dla_weights"]

from ultr_jax.losses.em import (  # noqa: E402
  RegressionEMState,
  em_posteriors,
  em_propensity_update,
  regression_em_estimator,
  regression_em_loss,
)

__all__ += [
  "RegressionEMState",
  "em_posteriors",
  "em_propensity_update",
  "regression_em_estimator",
  "regression_em_loss",
]

from ultr_jax.losses.two_tower import two_tower_log_probs, two_tower_loss  # noqa: E402

__all__ += ["two_tower_log_probs", "two_tower_loss"]

from ultr_jax.losses.pairwise import (  # noqa: E402
  PairwiseDebiasingState,
  click_pairs,
  pairwise_debiasing_estimator,
  pairwise_debiasing_loss,
  pairwise_debiasing_update,
)

__all__ += [
  "PairwiseDebiasingState",
  "click_pairs",
  "pairwise_debiasing_estimator",
  "pairwise_debiasing_loss",
  "pairwise_debiasing_update",
]

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
  DualAscentState,
  bias_likelihood_loss,
  binary_entropy,
  cell_marginals,
  conditional_mi_binary,
  doubly_robust_risk,
  dr_targets,
  dual_ascent_estimator,
  dual_ascent_update,
  effective_sample_size,
  ips_targets,
  listwise_risk,
  oracle_leakage,
  project_within_cells,
)

__all__ += [
  "DualAscentState",
  "bias_likelihood_loss",
  "binary_entropy",
  "cell_marginals",
  "conditional_mi_binary",
  "doubly_robust_risk",
  "dr_targets",
  "dual_ascent_estimator",
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

from ultr_jax.losses.lbd import (  # noqa: E402
  REFERENCE_GP_SHAPE,
  bernoulli_click_logits,
  factual_observation,
  gradient_penalty,
  lbd_forward,
  rescale_gp_weight,
  softmax_click_loss,
)

__all__ += [
  "REFERENCE_GP_SHAPE",
  "bernoulli_click_logits",
  "factual_observation",
  "gradient_penalty",
  "lbd_forward",
  "rescale_gp_weight",
  "softmax_click_loss",
]

from ultr_jax.losses.doubly_robust import (  # noqa: E402
  direct_method_loss,
  doubly_robust_softmax_loss,
  doubly_robust_targets,
  dr_clip_threshold,
)

__all__ += ["direct_method_loss", "doubly_robust_softmax_loss", "doubly_robust_targets", "dr_clip_threshold"]

from ultr_jax.losses.safe_cltr import (  # noqa: E402
  exposure_divergence,
  plackett_luce_samples,
  prpo_coefficients,
  prpo_loss,
  safe_dr_loss,
)

__all__ += ["exposure_divergence", "plackett_luce_samples", "prpo_coefficients", "prpo_loss", "safe_dr_loss"]

from ultr_jax.losses.disentangled import (  # noqa: E402
  disentangled_two_tower_loss,
  gradient_reversal,
  observation_dropout,
)

__all__ += ["disentangled_two_tower_loss", "gradient_reversal", "observation_dropout"]

from ultr_jax.losses.upe import backdoor_weights, upe_loss  # noqa: E402

__all__ += ["backdoor_weights", "upe_loss"]
