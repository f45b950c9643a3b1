"""ultr_jax.simulation: click models, examination probabilities, logging policy.

* :mod:`~ultr_jax.simulation.probabilities`: relevance -> click probability
  (ERR-style and binary) and the shared position tables;
* :mod:`~ultr_jax.simulation.click_models`: the click-model interface
  (:class:`ClickModel`) and registry (:func:`get_click_model`,
  :func:`click_models`), one module per model with all of its math (its jittable sampler over
  ``[..., list_size]``, exact marginals, conditional click probabilities, session log-likelihood,
  sufficient statistics, fitted parameters; the click chains share :class:`ChainModel`), and the
  config-driven :func:`make_click_fn`;
* :mod:`~ultr_jax.simulation.fitting`: click models fitted to session logs
  (L-BFGS on that likelihood) and scored by held-out perplexity;
* :mod:`~ultr_jax.simulation.streaming`: the same over a stream of session batches (one pass to the
  models' sufficient statistics, then the weighted fit; held-out scores);
* :mod:`~ultr_jax.simulation.minibatch`: optax fits over minibatches, each step updating only the rows of the
  per-document parameters its batch shows;
* :mod:`~ultr_jax.simulation.interleaving`: Plackett-Luce ranking samples
  and team-draft or probabilistic multileaving for online learning to rank;
* :mod:`~ultr_jax.simulation.logging_policy`: the ULTRA protocol's production
  ranker (trained on 1% of labelled queries) and the host-side reordering;
* :mod:`~ultr_jax.simulation.sif_toy`: the SIF study's synthetic toy data.

The fitted parameters of every registered click model (each model's :attr:`ClickModel.parameters`):

.. click-model-parameters::
"""

from ultr_jax.simulation.click_models import (
  CCM,
  DBN,
  DCM,
  IDENTIFIABILITY_CONTEXT_W,
  PBM,
  SDBN,
  UBM,
  Cascade,
  ChainModel,
  ClickModel,
  ClickSimulator,
  ContextPBM,
  Individual,
  Mixture,
  Parameter,
  PBMTable,
  PositionTrust,
  Trust,
  bernoulli_log_likelihood,
  cascade,
  ccm,
  click_models,
  click_simulator,
  context_pbm,
  dbn,
  dcm,
  get_click_model,
  individual,
  make_click_fn,
  make_position_trust_click_fn,
  mixture,
  pbm,
  pbm_table,
  position_trust,
  register,
  sample_clicks,
  sdbn,
  trust,
  ubm,
)
from ultr_jax.simulation.fitting import (
  CTR_MODELS,
  FITTABLE_CLICK_MODELS,
  LOGIT_PRIORS,
  ClickModelFit,
  click_model_log_likelihood,
  click_model_predict,
  click_prediction_scores,
  ctr_model_predict,
  evaluate_click_model,
  fit_click_model,
  fit_ctr_model,
  fit_ctr_model_from_statistics,
  init_click_model,
  logit_prior,
  simulate_session_log,
)
from ultr_jax.simulation.minibatch import fit_click_model_minibatch
from ultr_jax.simulation.click_models.tables import (
  FeatureTable,
  FullTable,
  HashedTable,
  ParameterTable,
  QuotientRemainderTable,
  table_logits,
)
from ultr_jax.simulation.streaming import (
  MEMORY_BUDGET_BYTES,
  ClickStatistics,
  PartitionedStatistics,
  StatisticsTooLarge,
  evaluate_click_model_stream,
  fit_click_model_from_statistics,
  fit_click_model_stream,
  gather_click_statistics,
  merge_click_statistics,
  open_partitioned_statistics,
  select_click_model_prior,
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
  policy_examination,
  stochastic_logging_click_fn,
  train_logging_policy,
)
from ultr_jax.simulation.sif_toy import sif_toy_dataset
from ultr_jax.simulation.long_tail import long_tail_document_params, simulate_long_tail_log
from ultr_jax.simulation.partitioned_fit import fit_partitioned_statistics
from ultr_jax.simulation.topk import (
  simulate_topk_log,
  topk_click_probability,
  topk_log_dataset,
  topk_selection_data,
)
from ultr_jax.simulation.probabilities import (
  ULTRA_EXAM_TABLE,
  binary_relevance_probability,
  relevance_probability,
)

__all__ = [
  "CCM",
  "DBN",
  "DCM",
  "PBM",
  "SDBN",
  "UBM",
  "Cascade",
  "ChainModel",
  "ContextPBM",
  "Individual",
  "Mixture",
  "Parameter",
  "PBMTable",
  "PositionTrust",
  "Trust",
  "ClickModel",
  "ClickSimulator",
  "click_simulator",
  "get_click_model",
  "register",
  "mixture",
  "sdbn",
  "CTR_MODELS",
  "FITTABLE_CLICK_MODELS",
  "ClickModelFit",
  "click_model_log_likelihood",
  "click_model_predict",
  "click_prediction_scores",
  "ctr_model_predict",
  "evaluate_click_model",
  "fit_click_model",
  "LOGIT_PRIORS",
  "logit_prior",
  "fit_ctr_model",
  "fit_ctr_model_from_statistics",
  "init_click_model",
  "simulate_session_log",
  "ClickStatistics",
  "StatisticsTooLarge",
  "MEMORY_BUDGET_BYTES",
  "PartitionedStatistics",
  "open_partitioned_statistics",
  "evaluate_click_model_stream",
  "fit_click_model_from_statistics",
  "fit_click_model_minibatch",
  "FeatureTable",
  "FullTable",
  "HashedTable",
  "ParameterTable",
  "QuotientRemainderTable",
  "table_logits",
  "fit_click_model_stream",
  "gather_click_statistics",
  "merge_click_statistics",
  "select_click_model_prior",
  "simulate_topk_log",
  "simulate_long_tail_log",
  "long_tail_document_params",
  "fit_partitioned_statistics",
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
  "binary_relevance_probability",
  "cascade",
  "ccm",
  "click_models",
  "context_pbm",
  "dbn",
  "dcm",
  "individual",
  "logging_policy_scores",
  "make_position_trust_click_fn",
  "make_click_fn",
  "pbm",
  "pbm_table",
  "policy_examination",
  "position_trust",
  "relevance_probability",
  "sample_clicks",
  "sif_toy_dataset",
  "stochastic_logging_click_fn",
  "train_logging_policy",
  "trust",
  "ubm",
]
