r"""Click models on logged sessions: their likelihood, predictions and held-out scores, and the fits' prior.

A session log is three ``[S, L]`` arrays in displayed order: ``doc_ids`` (a
dense id per query-document pair, as :func:`~ultr_jax.data.click_log_sessions`
makes them), ``clicks`` and a bool ``where``. Every model has a per-document
attraction :math:`a_d` plus its own bias parameters, each the sigmoid of a
free logit. The parameters are stated once, by each model (:attr:`~ultr_jax.simulation.ClickModel.parameters`:
shape and meaning; the table on the :mod:`ultr_jax.simulation` API page and on each model's page is generated
from them). The models are the registry's fittable ones (:func:`~ultr_jax.simulation.click_models`
``("fittable")``); ``model`` is a name or a :class:`~ultr_jax.simulation.ClickModel` (e.g.
``Mixture(("ubm", "dbn"))``), whose methods hold everything model-specific.

:func:`~ultr_jax.simulation.fit_click_model` maximises the sessions' log-likelihood
(:meth:`~ultr_jax.simulation.ClickModel.session_log_likelihood`, in log space from the logits) with the prior of
:func:`logit_prior`, by one of its solvers; :func:`ctr_model_predict` scores the click-through-rate baselines
that :class:`~ultr_jax.simulation.Counts` counts.
:func:`evaluate_click_model` gives the held-out log-likelihood and the
conditional perplexity per rank (Dupret & Piwowarski SIGIR'08; the measure
PyClick and CLAX report).
"""

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ultr_jax.metrics import clicks as click_metrics
from ultr_jax.simulation.click_models import ClickModel, LogSampler, SessionChecker, click_models, get_click_model
from ultr_jax.types import Array

__all__ = [
  "CTR_MODELS",
  "FITTABLE_CLICK_MODELS",
  "LOGIT_PRIORS",
  "logit_prior",
  "ClickModelFit",
  "init_click_model",
  "click_model_log_likelihood",
  "click_model_predict",
  "evaluate_click_model",
  "click_prediction_scores",
  "ctr_model_predict",
  "simulate_session_log",
]

#: The registry's fittable click models (:func:`~ultr_jax.simulation.click_models` ``("fittable")``, read at import).
FITTABLE_CLICK_MODELS = click_models("fittable")
# Each click-through-rate baseline as the rate tables it estimates beside the global rate, coarse to fine (a
# table's parent is the one before it, or the global rate): the dispatch is on the tables, not on the name.
_CTR_TABLES = {"gctr": (), "rctr": ("rank",), "dctr": ("document",), "drctr": ("document", "document_rank")}
#: Click-through-rate baselines (:class:`~ultr_jax.simulation.Counts`): global, per rank, per document, per document and rank.
CTR_MODELS = tuple(_CTR_TABLES)


class ClickModelFit(NamedTuple):
  """A fitted click model.

  Attributes:
    model: its name (one of :data:`FITTABLE_CLICK_MODELS`), or the :class:`~ultr_jax.simulation.ClickModel`
      it was given.
    params: dict of probabilities (see the module docstring).
    logits: the same parameters as logits (the optimiser's variables).
    log_likelihood: mean log-likelihood per training session (nats).
    grad_norm: the objective's final gradient norm.
    iterations: L-BFGS iterations run.
    converged: ``grad_norm <= tol``.
    feature_params: the fitted module parameters of each per-document parameter computed from features
      (:class:`~ultr_jax.simulation.click_models.tables.FeatureTable`, by name; a new document's logit is
      ``table.logits(feature_params[name], its_features)``), None where there is none.
    solver: the :class:`~ultr_jax.simulation.Solver` that ran (:func:`~ultr_jax.simulation.fit_click_model`
      reports its automatic choice here).
    stop_reason: why the solver stopped (converged, its iteration cap, its epochs).
    l2: the prior precision of the fit (with a grid, the chosen one).
    perplexities: with a grid of ``l2`` values, each one's held-out perplexity; else None.
  """

  model: "str | ClickModel"
  params: dict
  logits: dict
  log_likelihood: float
  grad_norm: float
  iterations: int
  converged: bool
  feature_params: Optional[dict] = None
  solver: Optional[object] = None
  stop_reason: str = ""
  l2: float = float("nan")
  perplexities: Optional[dict] = None


def fittable_model(model: "str | ClickModel") -> ClickModel:
  """The registry's fittable click model ``model`` (a name or an instance)."""
  if not isinstance(model, ClickModel) and model not in click_models("fittable"):
    raise ValueError(f"unknown click model {model!r} (expected one of {click_models('fittable')})")
  m = get_click_model(model)
  if not m.fittable:
    raise ValueError(f"click model {m.name!r} is not fittable (expected one of {click_models('fittable')})")
  return m


def init_click_model(model: "str | ClickModel", *, num_docs: int, list_size: int) -> dict:
  r"""Initial logits: every probability 1/2 (attraction, examination, continuation, ...).

  Args:
    model: one of :data:`FITTABLE_CLICK_MODELS`.
    num_docs: number of query-document ids ``D``.
    list_size: ranks ``L``.

  Returns:
    dict of ``float32`` logit arrays (zeros).

  >>> print({k: v.shape for k, v in init_click_model("dbn", num_docs=5, list_size=3).items()})
  {'attraction': (5,), 'perseverance': (), 'satisfaction': (5,)}
  """
  return fittable_model(model).init(num_docs=num_docs, list_size=list_size)


#: The centres :func:`logit_prior` offers for the per-document logits: ``"data_mean"`` (each table's own mean, a
#: hierarchical prior whose mean is estimated with the fit) and ``"zero"`` (every probability pulled to 1/2).
LOGIT_PRIORS = ("data_mean", "zero")


def check_prior(prior: str) -> str:
  if prior not in LOGIT_PRIORS:
    raise ValueError(f"prior must be one of {LOGIT_PRIORS}, got {prior!r}")
  return prior


def logit_prior(model: "str | ClickModel", logits: dict, l2: Array, prior: str = "zero") -> jax.Array:
  r"""The Gaussian prior's negative log-density (up to a constant) on a click model's logits, as the fits use it.

  With ``prior="zero"`` every logit has a standard-normal prior scaled by :math:`\ell_2`; with
  ``prior="data_mean"`` the per-document tables :math:`\theta^{(k)}` (``attraction`` and the model's
  :attr:`~ultr_jax.simulation.ClickModel.item_params`, :math:`D` entries each) are centred on a mean
  :math:`\mu_k` of their own, a hyperparameter estimated jointly with them (a hierarchical model's empirical-Bayes
  mean; Gelman et al., *Bayesian Data Analysis*, 3rd ed., Sec. 5.4), profiled out in closed form:

  .. math::
      \min_{\mu_k} \frac{\ell_2}{2} \sum_d (\theta^{(k)}_d - \mu_k)^2
        = \frac{\ell_2}{2} \sum_d (\theta^{(k)}_d - \bar\theta^{(k)})^2, \qquad
      \hat\mu_k = \bar\theta^{(k)} = \frac{1}{D} \sum_d \theta^{(k)}_d,

  plus :math:`\frac{\ell_2}{2}\lVert\beta\rVert^2` on the bias tables :math:`\beta`. At the fit's optimum a
  document without sessions sits at :math:`\hat\mu_k`, so :math:`\hat\mu_k` is also the mean over the seen
  documents; a rarely seen document is shrunk towards the log's typical attraction (on a long-tail log about
  1/4) rather than towards 1/2. CLAX (Hager et al. 2025) plays the same part with a learned baseline logit added
  to every embedding.

  Which centre: where every rank has a free examination (PBM, UBM), scaling the attractions up and the
  examinations down leaves the click probabilities nearly unchanged, and under ``"zero"`` the fit settles at
  the scale where the document logits average about 0, so the zero-centred prior is in effect centred on the
  log's typical attraction already; ``"data_mean"`` then drifts along that nearly flat direction (on a long-tail
  log 5-9x the L-BFGS iterations, for a held-out perplexity lower by under 1e-3), hence the L-BFGS fits'
  default ``"zero"``. Where the first rank is always examined (the cascade family: DBN, DCM, ...) nothing
  absorbs the offset, and the centre counts: :class:`~ultr_jax.simulation.Minibatch`'s default
  is ``"data_mean"``.

  Args:
    model: a fittable click model (name or instance): which tables are per document.
    logits: dict name -> logits (``attraction[D]``, the per-item ``[D]`` tables, the bias tables).
    l2: the prior precision :math:`\ell_2`.
    prior: one of :data:`LOGIT_PRIORS`.

  Returns:
    The scalar :math:`\frac{\ell_2}{2}(\sum_k \sum_d (\theta^{(k)}_d - \hat\mu_k)^2 + \lVert\beta\rVert^2)`.

  >>> logits = {"attraction": jnp.array([-1.0, -2.0, -3.0]), "examination": jnp.array([1.0, 0.0])}
  >>> print(logit_prior("pbm", logits, 1.0, prior="data_mean"), logit_prior("pbm", logits, 1.0, prior="zero"))
  1.5 7.5
  """
  m = fittable_model(model)
  if check_prior(prior) == "zero":
    return 0.5 * l2 * sum(jnp.sum(v**2) for v in jax.tree.leaves(logits))
  per_doc = ("attraction",) + tuple(m.item_params)
  total = sum(jnp.sum((v - jnp.mean(v)) ** 2) if k in per_doc else jnp.sum(v**2) for k, v in sorted(logits.items()))
  return 0.5 * l2 * total


def _split(m, params):
  """``(per-document parameters, bias parameters)`` of a fitted model's dict."""
  docs = ("attraction",) + tuple(m.item_params)
  return {k: params[k] for k in docs}, {k: v for k, v in params.items() if k not in docs}


def _check_list_size(m: ClickModel, params: dict, list_size: int) -> None:
  """Raises ValueError when the bias tables of ``params`` do not serve lists of ``list_size`` items: fitted on
  shorter lists (their ranks past the table would read its last entry) or of another layout. Tables fitted on
  longer lists serve shorter ones (their first ranks)."""
  _, bias = _split(m, params)
  got = {k: tuple(np.shape(v)) for k, v in bias.items()}
  shapes = lambda n: {k: tuple(s) for k, s in m.bias_shapes(n).items() if k in got}
  want = shapes(list_size)
  if all(got[k] == s for k, s in want.items()):
    return
  largest = max((d for s in got.values() for d in s), default=0)
  fitted = next((n for n in range(1, largest + 2) if shapes(n) == {k: got[k] for k in want}), None)
  if fitted is not None and fitted > list_size:
    return
  k = next(k for k, s in want.items() if got[k] != s)
  if fitted is not None:
    raise ValueError(
      f"{m.name}: parameters fitted on lists of {fitted} items ({k} of shape {got[k]}) cannot score lists of "
      f"{list_size} items (they need {k} of shape {want[k]})"
    )
  raise ValueError(f"{m.name}: {k} has shape {got[k]}, but lists of {list_size} items need {want[k]}")


def _log_likelihood_logits(m, theta, doc_ids, clicks, where):
  """Session log-likelihoods from the logits (:meth:`~ultr_jax.simulation.ClickModel.session_log_likelihood`)."""
  return m.session_log_likelihood(theta, doc_ids, clicks, where)


def click_model_log_likelihood(
  model: "str | ClickModel", params: dict, doc_ids: ArrayLike, clicks: ArrayLike, *, where: Optional[ArrayLike] = None
) -> Array:
  r"""Log-likelihood of each session under a click model: :math:`\sum_i \log P(c_i \mid c_{<i})`.

  Args:
    model: one of :data:`FITTABLE_CLICK_MODELS`.
    params: dict of probabilities (:attr:`ClickModelFit.params`).
    doc_ids: ``int[S, L]`` (or ``[..., L]``) query-document ids, displayed order.
    clicks: ``[..., L]`` 0/1 clicks.
    where: ``bool[..., L]``.

  Returns:
    ``float32[...]`` per session.

  Raises:
    ValueError: ``params`` fitted on shorter lists than ``doc_ids``' (their rank tables too short), naming both.

  >>> p = {"attraction": jnp.array([0.5, 0.2]), "examination": jnp.array([1.0, 0.5])}
  >>> ll = click_model_log_likelihood("pbm", p, jnp.array([0, 1]), jnp.array([1.0, 0.0]))
  >>> print(round(float(ll), 6), round(float(jnp.log(0.5 * 0.9)), 6))
  -0.798508 -0.798508
  """
  m = fittable_model(model)
  _check_list_size(m, params, np.shape(doc_ids)[-1])
  return _log_likelihood_logits(m, m.to_logits(params), doc_ids, clicks, where)


def click_model_predict(
  model: "str | ClickModel", params: dict, doc_ids: ArrayLike, clicks: ArrayLike, *, where: Optional[ArrayLike] = None
) -> dict:
  r"""Click probabilities of a click model on logged sessions.

  Returns both the conditional probability :math:`P(C_i = 1 \mid c_{<i})`
  (for the conditional perplexity and log-likelihood) and the marginal
  :math:`P(C_i = 1)` (click-through-rate prediction; for the PBM they are
  equal).

  Args:
    model, params, doc_ids, clicks, where: as :func:`click_model_log_likelihood`.

  Returns:
    dict with ``conditional`` and ``marginal``, each ``float32[..., L]`` (0
    where masked).

  Raises:
    ValueError: ``params`` fitted on shorter lists than ``doc_ids``' (their rank tables too short), naming both.

  >>> p = {"attraction": jnp.array([0.5, 0.5])}
  >>> out = click_model_predict("cascade", p, jnp.array([0, 1]), jnp.array([1.0, 0.0]))
  >>> print(out["conditional"], out["marginal"])  # after a cascade click nothing follows
  [0.5 0. ] [0.5  0.25]
  """
  m = fittable_model(model)
  _check_list_size(m, params, np.shape(doc_ids)[-1])
  docs, bias = _split(m, params)
  ids = jnp.clip(jnp.asarray(doc_ids, jnp.int32), 0, docs["attraction"].shape[0] - 1)
  a = docs["attraction"][ids]
  w = jnp.ones(a.shape, bool) if where is None else jnp.broadcast_to(jnp.asarray(where, bool), a.shape)
  per_item = {k: docs[k][ids] for k in m.item_params}
  cond, marginal = m.predict(jnp.asarray(clicks), a, {**bias, **per_item}, where=w)
  return {"conditional": jnp.where(w, cond, 0.0), "marginal": jnp.where(w, marginal, 0.0)}


def validate_sessions(doc_ids, clicks, where, num_docs, model=None):
  doc_ids = np.asarray(doc_ids)
  clicks = np.asarray(clicks, np.float32)
  where = np.ones(clicks.shape, bool) if where is None else np.broadcast_to(np.asarray(where, bool), clicks.shape)
  if doc_ids.shape != clicks.shape or clicks.ndim < 1:
    raise ValueError(f"doc_ids {doc_ids.shape} and clicks {clicks.shape} must have the same [..., L] shape")
  if not np.issubdtype(doc_ids.dtype, np.integer):
    raise ValueError(f"doc_ids must be integers, got {doc_ids.dtype}")
  # Each check is one cheap pass; the mask of the offending entries is built only to name the first one.
  bad = (clicks != 0.0) & (clicks != 1.0)
  if bad.any() and (bad := bad & where).any():
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    raise ValueError(f"clicks must be 0 or 1 where valid; clicks{list(idx)} = {clicks[idx]}")
  if isinstance(model, SessionChecker):
    model.check_sessions(clicks, where)
  lo, hi = int(np.min(doc_ids, where=where, initial=0)), int(np.max(doc_ids, where=where, initial=-1))
  if num_docs is None:
    num_docs = hi + 1 if hi >= 0 else 1
  if lo < 0 or hi >= num_docs:
    bad = where & ((doc_ids < 0) | (doc_ids >= num_docs))
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    raise ValueError(f"doc_ids must lie in [0, {num_docs}) where valid; doc_ids{list(idx)} = {doc_ids[idx]}")
  return doc_ids.astype(np.int32, copy=False), clicks, where, int(num_docs)


def evaluate_click_model(
  model: "str | ClickModel", params: dict, doc_ids: ArrayLike, clicks: ArrayLike, *, where: Optional[ArrayLike] = None
) -> dict:
  r"""Held-out scores of a click model on logged sessions.

  * ``log_likelihood``: mean session log-likelihood (nats; higher is better);
  * ``perplexity``, ``perplexity_per_rank``: the conditional click
    perplexity :math:`2^{-\frac{1}{N_r}\sum_s \log_2 P(C_{s,r} = c_{s,r} \mid c_{s,<r})}`
    (1 is perfect, 2 a coin), averaged over ranks;
  * ``ctr_perplexity``: the same with the marginal click probabilities (how
    well the model predicts click-through rates without the session's history).

  Args:
    model, params, doc_ids, clicks, where: as :func:`click_model_log_likelihood`.

  Returns:
    dict of floats (``perplexity_per_rank`` a list).

  >>> p = {"attraction": jnp.array([0.5]), "examination": jnp.array([1.0])}
  >>> print(evaluate_click_model("pbm", p, jnp.zeros((4, 1), int), jnp.array([[1.], [0.], [1.], [0.]]))["perplexity"])
  2.0
  """
  fittable_model(model)
  doc_ids, clicks, where, _ = validate_sessions(doc_ids, clicks, where, params["attraction"].shape[0])
  ll = click_model_log_likelihood(model, params, doc_ids, clicks, where=where)
  pred = click_model_predict(model, params, doc_ids, clicks, where=where)
  return click_prediction_scores(pred["conditional"], pred["marginal"], clicks, where=where, session_log_likelihood=ll)


def click_prediction_scores(
  conditional: ArrayLike,
  marginal: ArrayLike,
  clicks: ArrayLike,
  *,
  where: Optional[ArrayLike] = None,
  session_log_likelihood: Optional[ArrayLike] = None,
) -> dict:
  r"""The scores of :func:`evaluate_click_model` from any click predictions on logged sessions.

  ``conditional`` holds :math:`P(C_{s,r} = 1 \mid c_{s,<r})`, ``marginal`` :math:`P(C_{s,r} = 1)`, each
  ``[S, L]`` like ``clicks``: a fitted model's (:func:`click_model_predict`) or a simulator's own
  (``conditional_click_prob`` / ``click_prob`` of :func:`simulate_session_log`: the true parameters'
  scores, the floor of a fitted model's in expectation). ``session_log_likelihood`` (``[S]``) defaults to
  the sum over each session of :math:`\log P(c_{s,r} \mid c_{s,<r})` from ``conditional``.

  Args:
    conditional: ``[S, L]`` conditional click probabilities :math:`P(C_{s,r} = 1 \mid c_{s,<r})`.
    marginal: ``[S, L]`` marginal click probabilities :math:`P(C_{s,r} = 1)`.
    clicks: ``[S, L]`` observed 0/1 clicks.
    where: ``bool[S, L]`` displayed items (default all).
    session_log_likelihood: ``[S]`` each session's log-likelihood (None: summed from ``conditional``).

  Returns:
    dict of floats: ``log_likelihood`` (the mean over sessions with a displayed item, 0.0 without any),
    ``perplexity`` (of ``conditional``), ``perplexity_per_rank`` (a list of ``L``) and ``ctr_perplexity`` (of
    ``marginal``).

  >>> c = jnp.array([[1.0, 0.0], [0.0, 0.0]])
  >>> out = click_prediction_scores(jnp.full((2, 2), 0.5), jnp.full((2, 2), 0.5), c)
  >>> out["perplexity"], out["ctr_perplexity"], round(out["log_likelihood"], 4)
  (2.0, 2.0, -1.3863)
  """
  conditional, marginal = jnp.asarray(conditional), jnp.asarray(marginal)
  clicks = jnp.asarray(clicks, jnp.float32)
  where = jnp.ones(clicks.shape, bool) if where is None else jnp.asarray(where, bool)
  if session_log_likelihood is None:
    session_log_likelihood = click_metrics.click_log_likelihood(conditional, clicks, where=where, reduce_fn=None).sum(
      -1
    )
  per_rank = click_metrics.click_perplexity_per_rank(conditional, clicks, where=where)
  sessions = np.any(np.asarray(where), axis=-1)
  return {
    "log_likelihood": float(np.asarray(session_log_likelihood)[sessions].mean()) if sessions.any() else 0.0,
    "perplexity": float(click_metrics.click_perplexity(conditional, clicks, where=where)),
    "perplexity_per_rank": [float(v) for v in per_rank],
    "ctr_perplexity": float(click_metrics.click_perplexity(marginal, clicks, where=where)),
  }


def ctr_tables(model, docs, ranks, impressions, clicks, g, *, num_docs, length, prior) -> dict:
  """The rate tables of ``model`` from impressions and clicks per record (document, rank), global rate ``g``
  (``impressions`` None: one each)."""

  def rate(cells, size, parent):
    if impressions is None:
      n = np.bincount(cells, minlength=size).astype(np.float64)
    else:
      n = np.bincount(cells, weights=impressions, minlength=size)
    k = np.bincount(cells, weights=clicks, minlength=size)
    return np.where(n + prior > 0, (k + prior * parent) / np.maximum(n + prior, 1e-12), parent)

  tables = _CTR_TABLES[model]
  out = {"global": np.float32(g)}
  if "rank" in tables:
    out["rank"] = rate(ranks, length, g).astype(np.float32)
  if "document" in tables:
    out["document"] = rate(docs, num_docs, g).astype(np.float32)
  if "document_rank" in tables:
    parent = np.repeat(out["document"].astype(np.float64), length)
    out["document_rank"] = rate(docs * length + ranks, num_docs * length, parent).reshape(num_docs, length)
    out["document_rank"] = out["document_rank"].astype(np.float32)
  return out


def ctr_model_predict(model: str, params: dict, doc_ids: ArrayLike) -> np.ndarray:
  """The click probability of every item of ``doc_ids`` (``[S, L]``, displayed order) under a CTR baseline.

  Documents or ranks past the tables get the parent's rate (``global``, or the document's).

  Args:
    model: one of :data:`CTR_MODELS`.
    params: the rates a :class:`~ultr_jax.simulation.Counts` fit counted for that model (``fit.params``).
    doc_ids: ``int[S, L]`` document ids in displayed order.

  Returns:
    ``float32[S, L]`` click probabilities (the conditional and the marginal alike).

  Raises:
    ValueError: for an unknown ``model``.

  >>> from ultr_jax.simulation import Counts, fit_click_model
  >>> p = fit_click_model("rctr", {"doc_ids": np.array([[0, 1]]), "clicks": np.array([[1.0, 0.0]])}, solver=Counts(0.0))
  >>> print(ctr_model_predict("rctr", p.params, np.array([[1, 0]])))
  [[1. 0.]]
  """
  if model not in CTR_MODELS:
    raise ValueError(f"unknown CTR model {model!r} (expected one of {CTR_MODELS})")
  ids = np.asarray(doc_ids, np.int64)
  ranks = np.broadcast_to(np.arange(ids.shape[-1]), ids.shape)
  g = np.float32(params["global"])
  tables = _CTR_TABLES[model]
  if "rank" in tables:
    table = params["rank"]
    return np.where(ranks < table.shape[0], table[np.minimum(ranks, table.shape[0] - 1)], g).astype(np.float32)
  if "document" not in tables:
    return np.full(ids.shape, g, np.float32)
  doc = params["document"]
  known = (ids >= 0) & (ids < doc.shape[0])
  safe = np.clip(ids, 0, doc.shape[0] - 1)
  p = np.where(known, doc[safe], g)
  if "document_rank" in tables:
    table = params["document_rank"]
    in_table = known & (ranks < table.shape[1])
    p = np.where(in_table, table[safe, np.minimum(ranks, table.shape[1] - 1)], p)
  return p.astype(np.float32)


def simulate_session_log(
  key: jax.Array,
  model: "str | ClickModel",
  attraction: ArrayLike,
  *,
  num_sessions: int,
  noise: float = 0.3,
  **model_params,
) -> dict:
  r"""A synthetic session log: a noisy logging ranker, then one click model's sessions.

  Each session draws a query uniformly, displays its ``L`` documents in the
  order of :math:`a_d + \text{noise} \cdot \mathcal{N}(0, 1)` (so documents
  move between ranks from session to session, which identifies position
  effects; ``noise = inf`` shuffles uniformly), and samples clicks from the
  named model's sampler (:func:`~ultr_jax.simulation.pbm_table` for ``pbm``,
  :func:`~ultr_jax.simulation.ubm`, :func:`~ultr_jax.simulation.cascade`,
  :func:`~ultr_jax.simulation.dcm`, :func:`~ultr_jax.simulation.dbn`,
  :func:`~ultr_jax.simulation.ccm`, :func:`~ultr_jax.simulation.trust`) with ``model_params``.

  Args:
    key: PRNG key.
    model: one of :data:`FITTABLE_CLICK_MODELS`.
    attraction: ``float[Q, L]`` attraction of each query's documents; the
      document ``j`` of query ``q`` gets id ``q * L + j``.
    num_sessions: ``S`` (static).
    noise: the logging ranker's score noise.
    **model_params: passed to the sampler (e.g. ``continuation=0.6``); a
      ``[Q, L]`` array (the shape of ``attraction``) is a per-document
      parameter, displayed with its document (e.g. the DBN's
      ``satisfaction``).

  Returns:
    dict of ``doc_ids int32[S, L]``, ``clicks float32[S, L]``, ``where
    bool[S, L]`` (all True), ``queries int32[S]`` and the generating
    model's ``click_prob`` (marginal) and ``conditional_click_prob``
    (given the session's clicks above), each ``float32[S, L]``: the true
    parameters' predictions, whose held-out perplexity a fitted model's is
    compared with.

  >>> log = simulate_session_log(jax.random.key(0), "cascade", jnp.full((3, 4), 0.5), num_sessions=6)
  >>> print(log["doc_ids"].shape, int(log["clicks"].sum(-1).max()))
  (6, 4) 1
  """
  m = fittable_model(model)
  a = jnp.asarray(attraction, jnp.float32)
  num_queries, length = a.shape
  k_q, k_n, k_c = jax.random.split(key, 3)
  queries = jax.random.randint(k_q, (num_sessions,), 0, num_queries)
  if np.isinf(noise):
    score = jax.random.uniform(k_n, (num_sessions, length))
  else:
    score = a[queries] + noise * jax.random.normal(k_n, (num_sessions, length))
  order = jnp.argsort(-score, axis=-1)
  doc_ids = (queries[:, None] * length + order).astype(jnp.int32)
  per_item: dict[str, Any] = {
    k: (jnp.asarray(v, jnp.float32).reshape(-1)[doc_ids] if np.shape(v) == a.shape else v)
    for k, v in model_params.items()
  }  # per-document [Q, L] parameters follow their documents
  sampler = m.session_sampler if isinstance(m, LogSampler) else m.simulate
  out = sampler(k_c, a.reshape(-1)[doc_ids], **per_item)
  return {
    "doc_ids": doc_ids,
    "clicks": out["clicks"],
    "where": jnp.ones(doc_ids.shape, bool),
    "queries": queries.astype(jnp.int32),
    "click_prob": out["click_prob"],
    "conditional_click_prob": out["conditional_click_prob"],
  }
