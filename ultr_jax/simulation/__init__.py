"""ultr_jax.simulation: click models, examination probabilities, logging policy.

* :mod:`~ultr_jax.simulation.probabilities`: relevance -> click probability
  (ERR-style and binary) and examination models (PBM, eye-tracking table,
  trust bias, context-dependent PBM, LBD's individual-level observation,
  cascade/DCM, DBN/CCM click-chain and UBM marginals);
* :mod:`~ultr_jax.simulation.click_models`: jittable samplers over
  ``[..., list_size]`` and the config-driven :func:`make_click_fn`;
* :mod:`~ultr_jax.simulation.likelihood`: the same models as likelihoods of
  observed sessions (conditional click probabilities, session log-likelihood);
* :mod:`~ultr_jax.simulation.fitting`: click models fitted to session logs
  (L-BFGS on that likelihood) and scored by held-out perplexity;
* :mod:`~ultr_jax.simulation.interleaving`: Plackett-Luce ranking samples
  and team-draft or probabilistic multileaving for online learning to rank;
* :mod:`~ultr_jax.simulation.logging_policy`: the ULTRA protocol's production
  ranker (trained on 1% of labelled queries) and the host-side reordering.
"""

from ultr_jax.simulation.click_models import (
    cascade,
    ccm,
    click_models,
    context_pbm,
    dbn,
    dcm,
    individual,
    make_click_fn,
    pbm,
    pbm_table,
    sample_chain_clicks,
    sample_clicks,
    sample_dcm_clicks,
    sample_ubm_clicks,
    trust,
    ubm,
)
from ultr_jax.simulation.fitting import (
    FITTABLE_CLICK_MODELS,
    ClickModelFit,
    click_model_log_likelihood,
    click_model_predict,
    click_prediction_scores,
    evaluate_click_model,
    fit_click_model,
    init_click_model,
    simulate_session_log,
)
from ultr_jax.simulation.likelihood import (
    bernoulli_log_likelihood,
    chain_conditional_click_prob,
    chain_continuations,
    chain_log_likelihood,
    chain_log_probs,
    log_bias_from_logits,
    log_probs_from_logs,
    logit_bias_shapes,
    logit_log_probs,
    ubm_conditional_click_prob,
    ubm_log_likelihood,
    ubm_log_probs,
)
from ultr_jax.simulation.interleaving import (
    multileave_credit,
    multileave_preferences,
    plackett_luce_log_prob,
    plackett_luce_sample,
    probabilistic_multileave,
    probabilistic_multileave_assignment,
    team_draft_multileave,
)
from ultr_jax.simulation.logging_policy import (
    apply_logging_policy,
    logging_policy_scores,
    train_logging_policy,
)
from ultr_jax.simulation.position_trust import (
    make_any_click_fn,
    make_position_trust_click_fn,
    position_trust,
    sif_toy_dataset,
)
from ultr_jax.simulation.topk import (
    simulate_topk_log,
    topk_click_probability,
    topk_log_dataset,
    topk_selection_data,
)
from ultr_jax.simulation.probabilities import (
    IDENTIFIABILITY_CONTEXT_W,
    ULTRA_EXAM_TABLE,
    binary_relevance_probability,
    chain_examination,
    context_pbm_examination,
    dcm_examination,
    individual_examination,
    make_context_vectors,
    pbm_examination,
    pbm_table_examination,
    relevance_probability,
    trust_bias_epsilons,
    ubm_examination,
    ubm_gamma,
)

__all__ = [
    "FITTABLE_CLICK_MODELS",
    "ClickModelFit",
    "click_model_log_likelihood",
    "click_model_predict",
    "click_prediction_scores",
    "evaluate_click_model",
    "fit_click_model",
    "init_click_model",
    "simulate_session_log",
    "simulate_topk_log",
    "topk_click_probability",
    "topk_log_dataset",
    "topk_selection_data",
    "IDENTIFIABILITY_CONTEXT_W",
    "ULTRA_EXAM_TABLE",
    "apply_logging_policy",
    "multileave_credit",
    "multileave_preferences",
    "plackett_luce_log_prob",
    "plackett_luce_sample",
    "probabilistic_multileave",
    "probabilistic_multileave_assignment",
    "team_draft_multileave",
    "bernoulli_log_likelihood",
    "chain_conditional_click_prob",
    "chain_continuations",
    "chain_log_likelihood",
    "chain_log_probs",
    "log_bias_from_logits",
    "log_probs_from_logs",
    "logit_bias_shapes",
    "logit_log_probs",
    "ubm_conditional_click_prob",
    "ubm_log_likelihood",
    "ubm_log_probs",
    "binary_relevance_probability",
    "cascade",
    "ccm",
    "chain_examination",
    "click_models",
    "context_pbm",
    "context_pbm_examination",
    "dbn",
    "dcm",
    "dcm_examination",
    "individual",
    "individual_examination",
    "logging_policy_scores",
    "make_position_trust_click_fn",
    "make_any_click_fn",
    "make_click_fn",
    "make_context_vectors",
    "pbm",
    "pbm_examination",
    "pbm_table",
    "pbm_table_examination",
    "position_trust",
    "relevance_probability",
    "sample_chain_clicks",
    "sample_clicks",
    "sample_dcm_clicks",
    "sample_ubm_clicks",
    "sif_toy_dataset",
    "train_logging_policy",
    "trust",
    "trust_bias_epsilons",
    "ubm",
    "ubm_examination",
    "ubm_gamma",
]
