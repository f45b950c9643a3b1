r"""The click-model interface (:class:`ClickModel`) and its registry.

A click model is one frozen (hashable) object that declares in one place

* its **simulation config** (:attr:`ClickModel.config_keys`: the keys of a
  :func:`~ultr_jax.simulation.make_click_fn` config with their defaults; an unknown key is an error naming it) and
  the extra **batch inputs** its simulator reads (:attr:`ClickModel.batch_inputs`, e.g. ``("context",)``);
* its **simulator** (:meth:`ClickModel.session`: the exact marginal examination and click probabilities of
  every item, a session sampler and the conditional click probability :math:`P(C_i = 1 \mid c_{<i})` of any
  observed clicks; :meth:`ClickModel.simulate` turns them into the samplers' output dict);
* its **fitted parameters**, stated once in :attr:`ClickModel.parameters` (name, shape, one line each; the
  docs render them as a table on each model's page), a dict of logits (:meth:`ClickModel.init` over
  ``num_docs`` documents and ``list_size`` ranks: the per-document ``attraction`` plus
  :attr:`ClickModel.item_params` and the bias tables of :meth:`ClickModel.bias_shapes`, both read off
  :attr:`ClickModel.parameters`), with the session likelihood in log space
  (:meth:`ClickModel.log_probs`: :math:`\log q_i` and :math:`\log(1 - q_i)`, whose Bernoulli sum is
  :math:`\log P(c_{1:L})`), the conditional and marginal click probabilities (:meth:`ClickModel.predict`)
  and a sampler (:meth:`ClickModel.sample`) in the same parametrisation;
* its **registry flags** (:attr:`ClickModel.fittable` by maximum likelihood, usable as a click-model
  :attr:`ClickModel.loss`), from which the name lists (:data:`~ultr_jax.simulation.FITTABLE_CLICK_MODELS`, ...)
  are derived.

What only some models have, and only some callers need, is an **optional capability**: a small
``runtime_checkable`` Protocol the caller checks for with ``isinstance``, not a method on every model:

* :class:`ClickChain`: a click chain's continuation probabilities :math:`c^0, c^1` (the cascade family);
* :class:`StatisticsReduction`: a reduction of a batch of sessions to mergeable weighted records
  (:mod:`~ultr_jax.simulation.click_models.statistics`) with the log-likelihood on them, which the statistics
  solver (:class:`~ultr_jax.simulation.Statistics`) fits; a model without one of its own reduces to its distinct
  session patterns (:func:`statistics_reduction`, exact for every model);
* :class:`BiasIndexed`: a reduction whose records each read one bias parameter (the Newton passes of
  :mod:`~ultr_jax.simulation.partitioned_fit` eliminate the documents with it);
* :class:`SessionChecker`: a model that gives some click patterns probability zero names the first such session;
* :class:`OwnClickFunction`: a model whose simulator reads more of the batch than :meth:`ClickModel.session` takes;
* :class:`LogSampler`: a model that draws its simulated logs in another parametrisation than :meth:`ClickModel.simulate`.

Everything that needs a click model (the config factory, the fits, the likelihood losses, the online users)
asks :func:`get_click_model` for it and never compares names. A new model is one module with one subclass
and one :func:`register` line in ``click_models/__init__.py``.
"""

import dataclasses
import difflib
from typing import Any, Callable, ClassVar, Mapping, NamedTuple, Optional, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax.simulation.click_models.samplers import sample_clicks
from ultr_jax.simulation.click_models.statistics import (
  ClickStatistics,
  ItemCounter,
  RecordMerger,
  item_statistics,
  pattern_sessions,
  pattern_statistics,
)
from ultr_jax.types import Array, ClickFn, PRNGKey

__all__ = [
  "ClickModel",
  "ClickChain",
  "StatisticsReduction",
  "BiasIndexed",
  "SessionChecker",
  "LogSampler",
  "OwnClickFunction",
  "statistics_reduction",
  "Parameter",
  "Session",
  "bernoulli_log_likelihood",
  "parameter_table",
  "register",
  "get_click_model",
  "click_models",
]

_REGISTRY: dict[str, type] = {}

#: Keys every simulation config may hold besides the model's own (:attr:`ClickModel.config_keys`): the model's
#: name, the relevance mapping and the sampling mode. Everything else a model declares itself: ``eta``, the
#: position-bias severity, belongs to the models with a position table, so a chain model (cascade, DCM, DBN, ...)
#: refuses it. A key whose value is None is not set (the model's default applies): a binary's config section
#: holds ``eta`` as a None placeholder, so ``--config.click_model.name=dbn`` switches the model alone.
COMMON_CONFIG_KEYS = (
  "name",
  "relevance",
  "eps",
  "eps_plus",
  "ymax",
  "threshold",
  "top_k",
  "num_sessions",
  "num_impressions",
)
#: Capabilities :func:`click_models` filters on.
CAPABILITIES = ("fittable", "loss", "chain")


def register(cls: type) -> type:
  """Adds a :class:`ClickModel` subclass to the registry under ``cls.name`` (usable as a decorator).

  Args:
    cls: the :class:`ClickModel` subclass; its ``name`` must be non-empty and not yet registered.

  Returns:
    ``cls`` itself, unchanged.

  Raises:
    ValueError: if ``cls.name`` is empty or already registered.

  >>> print(get_click_model("dcm").name)
  dcm
  """
  if not cls.name or cls.name in _REGISTRY:
    raise ValueError(f"click model name {cls.name!r} is empty or already registered")
  _REGISTRY[cls.name] = cls
  return cls


def get_click_model(model: "str | ClickModel") -> "ClickModel":
  """The registered click model ``model`` (a name: its default instance; an instance: itself).

  Args:
    model: a registered name (one of :func:`click_models`) or a :class:`ClickModel` instance.

  Returns:
    The :class:`ClickModel`: a fresh default instance of the named class, or ``model`` itself.

  Raises:
    ValueError: for an unknown name, listing the registered ones.

  >>> get_click_model("pbm").fittable, get_click_model("pbm_table").fittable
  (True, False)
  """
  if isinstance(model, ClickModel):
    return model
  if model not in _REGISTRY:
    raise ValueError(f"unknown click model {model!r}; expected one of {tuple(_REGISTRY)}")
  return _REGISTRY[model]()


def click_models(capability: Optional[str] = None) -> tuple[str, ...]:
  """Names of the registered click models (in registration order), all or those with a ``capability``.

  ``capability`` is one of ``fittable`` (maximum likelihood on a session log), ``loss`` (a click-model
  likelihood loss with a learned attraction) or ``chain`` (a click chain: continuation probabilities
  :math:`c^0, c^1`).

  Args:
    capability: None (every model) or one of ``"fittable"``, ``"loss"``, ``"chain"``.

  Returns:
    The names, a tuple of str in registration order.

  Raises:
    ValueError: for an unknown ``capability``.

  >>> click_models()[:3], click_models("chain")[:2]
  (('pbm', 'ubm', 'cascade'), ('cascade', 'dcm'))
  """
  if capability is None:
    return tuple(_REGISTRY)
  if capability not in CAPABILITIES:
    raise ValueError(f"unknown click-model capability {capability!r}; expected one of {CAPABILITIES}")
  if capability == "chain":
    return tuple(name for name, cls in _REGISTRY.items() if issubclass(cls, ClickChain))
  return tuple(name for name, cls in _REGISTRY.items() if getattr(cls, capability))


# ----------------------------------------------------------------------------
# Helpers shared by the models.


def prepare(attraction, where, positions, top_k):
  """``(r, where, positions, shown)`` with the defaults filled in (``shown``: displayed within ``top_k``)."""
  r = jnp.asarray(attraction, jnp.float32)
  if where is None:
    where = jnp.ones(r.shape, bool)
  if positions is None:
    positions = jnp.broadcast_to(jnp.arange(r.shape[-1], dtype=jnp.int32), r.shape)
  shown = where if top_k is None else where & (positions < top_k)
  return r, where, positions, shown


def display_order(positions, where):
  """Permutation sorting items by position (masked last) and its inverse."""
  big = jnp.iinfo(jnp.int32).max
  order = jnp.argsort(jnp.where(where, positions, big), axis=-1, stable=True)
  inverse = jnp.argsort(order, axis=-1, stable=True)
  return order, inverse


def per_item(value, positions, shape, name):
  """A scalar, a per-position sequence (the last value reused beyond it) or ``[..., L]`` values."""
  if isinstance(value, (int, float)):
    return float(value)
  if isinstance(value, (list, tuple)):
    table = jnp.asarray(value, jnp.float32)
    if table.ndim != 1 or table.shape[0] == 0:
      raise ValueError(f"{name}: a per-position sequence must be non-empty and flat")
    return table[jnp.clip(positions, 0, table.shape[0] - 1)]
  return jnp.broadcast_to(jnp.asarray(value, jnp.float32), shape)


def rank_table(t: Array, ranks: Optional[Array], shape: tuple[int, ...]) -> Array:
  """``t[rank]`` for every item (``ranks`` None: the item index); ranks beyond the table use its last entry."""
  t = jnp.asarray(t, jnp.float32)
  length = shape[-1]
  if ranks is None:  # rank = item index: a static slice (a gather's gradient is a slow scatter on CPU)
    idx = np.minimum(np.arange(length), t.shape[0] - 1)
    return jnp.broadcast_to(t[idx] if t.shape[0] < length else t[:length], shape)
  return t[jnp.clip(jnp.asarray(ranks, jnp.int32), 0, t.shape[0] - 1)]


def full_mask(x: Array, where: Optional[Array]) -> Array:
  return jnp.ones(x.shape, bool) if where is None else jnp.broadcast_to(jnp.asarray(where, bool), x.shape)


def bernoulli_log_likelihood(clicks: Array, log_q: Array, log_1mq: Array, *, where: Optional[Array] = None) -> Array:
  r"""Session log-likelihood :math:`\sum_i c_i \log q_i + (1 - c_i)\log(1 - q_i)` over valid items.

  Every click model factorises a session's probability into each click's probability given the clicks above
  it, :math:`q_i = P(C_i = 1 \mid c_{<i})` (Dupret & Piwowarski SIGIR'08; Chuklin, Markov & de Rijke, *Click
  Models for Web Search*, 2015, Eq. 3.1); :meth:`ClickModel.log_probs` gives :math:`\log q` and
  :math:`\log(1 - q)` separately so neither loses precision near 0 or 1.

  Args:
    clicks: ``[..., L]`` 0/1 clicks.
    log_q: ``[..., L]`` log conditional click probabilities.
    log_1mq: ``[..., L]`` log conditional no-click probabilities.
    where: ``bool[..., L]``.

  Returns:
    ``float32[...]`` (0 for a fully masked list).

  >>> q = jnp.array([0.5, 0.25])
  >>> print(bernoulli_log_likelihood(jnp.array([1.0, 0.0]), jnp.log(q), jnp.log1p(-q)))  # log(0.5 * 0.75)
  -0.98082924
  """
  c = jnp.asarray(clicks, jnp.float32)
  where = full_mask(c, where)
  # Select, not multiply: 0 * -inf would be NaN for the outcome that did not happen.
  term = jnp.where(c > 0.5, log_q, log_1mq)
  return jnp.sum(jnp.where(where, term, 0.0), axis=-1)


class Parameter(NamedTuple):
  """One fitted parameter of a click model (:attr:`ClickModel.parameters`): the logits of a table.

  Attributes:
    shape: the table's shape over ``D`` documents and ``L`` ranks: ints and the symbols ``"D"`` (one entry
      per document: a per-item parameter, :attr:`ClickModel.item_params`), ``"L"`` and ``"L + 1"``.
    doc: one line: what the probability (the sigmoid of each logit, unless it says otherwise) means.
  """

  shape: tuple
  doc: str


#: Every fittable model's per-document attraction (not repeated in :attr:`ClickModel.parameters`).
ATTRACTION = Parameter(("D",), "attraction :math:`a_d`: the probability of a click on an examined document")


def _dim(entry: Any, num_ranks: int) -> int:
  """The size of one :attr:`Parameter.shape` entry over ``num_ranks`` ranks."""
  if isinstance(entry, int):
    return entry
  sizes = {"L": num_ranks, "L + 1": num_ranks + 1}
  if entry not in sizes:
    raise ValueError(f"parameter shape entry {entry!r}: expected an int, 'L' or 'L + 1' (or 'D' per document)")
  return sizes[entry]


def parameter_table(models: Optional[tuple] = None) -> list[str]:
  """The fitted parameters of registered click models (default: every fittable one) as reStructuredText lines.

  Generated from each model's :attr:`ClickModel.parameters` (the docs show it on the simulation API page and
  each model's own page).

  >>> print("\\n".join(parameter_table(("dcm",))))  # doctest: +NORMALIZE_WHITESPACE
  .. list-table::
     :header-rows: 1
     :widths: 10 22 68
  <BLANKLINE>
     * - model
       - parameter
       - meaning
     * - dcm
       - ``attraction[D]``
       - attraction :math:`a_d`: the probability of a click on an examined document
     * - dcm
       - ``continuation[L]``
       - continuation :math:`\\lambda_r`: the probability of going on after a click at rank :math:`r`
  """
  names = click_models("fittable") if models is None else models
  lines = [
    ".. list-table::",
    "   :header-rows: 1",
    "   :widths: 10 22 68",
    "",
    "   * - model",
    "     - parameter",
    "     - meaning",
  ]
  for name in names:
    m = get_click_model(name)
    for key, p in {"attraction": ATTRACTION, **m.parameters}.items():
      shape = ", ".join(str(d) for d in p.shape)
      lines += [f"   * - {m.name}", f"     - ``{key}[{shape}]``" if shape else f"     - ``{key}``", f"     - {p.doc}"]
  return lines


def _take(x, idx):
  return jnp.take_along_axis(x, jnp.broadcast_to(idx, x.shape), axis=-1)


class Session(NamedTuple):
  r"""A click model on one batch of lists ``[..., L]``: what its sampler and likelihood need.

  Attributes:
    examination: marginal examination probability of each item (array order; 0 where not shown for the
      sequential models, masked by :meth:`output` for the independent ones).
    click_prob: marginal click probability of each item.
    shown: ``bool[..., L]`` the displayed items (``where`` within ``top_k``).
    independent: clicks independent given the list (the conditional click probability is the marginal).
    sample_display: ``(key, num_sessions) -> clicks`` in display order (sequential models).
    conditional_display: ``clicks -> P(C_i = 1 | c_<i)``, display order in and out (sequential models).
    inverse: display order -> array order permutation (None: the same).
    order: array order -> display order permutation (None: the same).
    extras: further outputs (trust: ``eps_plus``, ``eps_minus``).
    top_k: the display cut-off (``shown`` is output with it).
  """

  examination: Array
  click_prob: Array
  shown: Array
  independent: bool
  sample_display: Optional[Callable] = None
  conditional_display: Optional[Callable] = None
  inverse: Optional[Array] = None
  order: Optional[Array] = None
  extras: Optional[dict] = None
  top_k: Optional[int] = None

  def _back(self, x):
    return x if self.inverse is None else _take(x, self.inverse)

  def _forth(self, x):
    return x if self.order is None else _take(x, self.order)

  def marginals(self) -> tuple[Array, Array]:
    """``(examination, click_prob)``, array order, 0 where not shown."""
    if self.independent:
      return jnp.where(self.shown, self.examination, 0.0), jnp.where(self.shown, self.click_prob, 0.0)
    return self.examination, self.click_prob

  def sample(self, key: PRNGKey, num_sessions: Optional[int] = None) -> Array:
    """One session per list (``[S, ..., L]`` with ``num_sessions``), array order."""
    if self.independent:
      return sample_clicks(key, self.marginals()[1], where=self.shown, num_sessions=num_sessions)
    assert self.sample_display is not None  # a sequential session has its sampler
    return self._back(self.sample_display(key, num_sessions))

  def conditional(self, clicks: Array) -> Array:
    r""":math:`P(C_i = 1 \mid c_{<i})` of observed ``clicks`` (array order, ``[..., L]`` broadcasting)."""
    if self.independent:
      return jnp.broadcast_to(self.marginals()[1], jnp.shape(clicks))
    assert self.conditional_display is not None  # a sequential session has its filter
    c = jnp.asarray(clicks, jnp.float32)
    return self._back(self.conditional_display(self._forth(c)))

  def output(self, key: PRNGKey, num_sessions: Optional[int], num_impressions: Optional[int]) -> dict:
    """The samplers' dict (see :mod:`ultr_jax.simulation.click_models`)."""
    exam, click_prob = self.marginals()
    if self.independent or num_impressions is not None:
      if not self.independent:  # aggregated mode: each record's CTR from its marginal
        click_prob = jnp.where(self.shown, click_prob, 0.0)
        exam = jnp.where(self.shown, exam, 0.0)
      out = {"examination": exam, "click_prob": click_prob}
      clicks = sample_clicks(
        key, click_prob, where=self.shown, num_sessions=num_sessions, num_impressions=num_impressions
      )
      out["clicks"] = clicks
      if num_impressions is not None:
        out["click_counts"] = jnp.round(clicks * num_impressions).astype(jnp.int32)
      else:  # clicks independent given the list: the marginal is the conditional
        out["conditional_click_prob"] = jnp.broadcast_to(click_prob, clicks.shape)
    else:
      assert self.sample_display is not None and self.conditional_display is not None  # a sequential session
      clicks_s = self.sample_display(key, num_sessions)
      out = {
        "examination": exam,
        "click_prob": click_prob,
        "clicks": self._back(clicks_s),
        "conditional_click_prob": self._back(self.conditional_display(clicks_s)),
      }
    if self.top_k is not None:
      out["shown"] = self.shown
    if self.extras:
      out.update(self.extras)
    return out


class _FrozenArray(NamedTuple):
  values: tuple
  shape: tuple
  dtype: str


def freeze(value: Any) -> Any:
  """A hashable copy of a config value (arrays become :class:`_FrozenArray`, lists tuples, mappings sorted pairs).

  >>> thaw(freeze(np.eye(2, dtype=np.float32))).dtype, hash(freeze([1, [2.0]])) == hash(((1, (2.0,))))
  (dtype('float32'), True)
  """
  if isinstance(value, _FrozenArray):
    return value
  if isinstance(value, (np.ndarray, jax.Array)):
    v = np.asarray(value)
    return _FrozenArray(tuple(v.ravel().tolist()), tuple(v.shape), str(v.dtype))
  if isinstance(value, (list, tuple)):
    return tuple(freeze(v) for v in value)
  if isinstance(value, Mapping):
    return tuple(sorted((k, freeze(v)) for k, v in value.items()))
  return value


def thaw(value: Any) -> Any:
  """The array of a frozen array (anything else unchanged)."""
  if isinstance(value, _FrozenArray):
    return np.asarray(value.values, dtype=value.dtype).reshape(value.shape)
  return value


@dataclasses.dataclass(frozen=True)
class ClickModel:
  r"""Base class of the click models (see the module docstring); subclasses are frozen dataclasses.

  Subclasses set the class attributes and override what they support: the simulation side
  (:meth:`simulation_kwargs`, :meth:`session`) and, when :attr:`fittable`, the fitted side
  (:attr:`parameters`, :meth:`log_probs`, :meth:`predict`, :meth:`sample`).

  >>> m = get_click_model("dcm")
  >>> sorted(m.init(num_docs=4, list_size=3)), m.bias_shapes(3)
  (['attraction', 'continuation'], {'continuation': (3,)})
  """

  #: The registry name (``config.name``).
  name: ClassVar[str] = ""
  #: Simulation-config keys of this model with their defaults (``None`` for a key without a default, optional or required).
  config_keys: ClassVar[Mapping[str, Any]] = {}
  #: Batch entries the simulator reads besides ``labels``, ``where`` and ``positions``.
  batch_inputs: ClassVar[tuple[str, ...]] = ()
  #: The fitted parameters besides the per-document ``attraction``, stated once as name -> :class:`Parameter`
  #: (shape and a one-line meaning). :attr:`item_params` and :meth:`bias_shapes` are read off it.
  parameters: ClassVar[Mapping[str, Parameter]] = {}
  #: Fittable to a session log by maximum likelihood (:func:`~ultr_jax.simulation.fit_click_model`).
  fittable: ClassVar[bool] = True
  #: Usable as a click-model likelihood loss with a learned attraction (:mod:`ultr_jax.losses.click_model`).
  loss: ClassVar[bool] = True
  #: The bias table whose column 0 (or entries) is the examination before any click (a learner's propensities).
  propensity_table: ClassVar[Optional[str]] = None

  # -- simulation side ------------------------------------------------------

  def check_config(self, cfg: Mapping[str, Any]) -> None:
    """Raises ValueError naming any key of ``cfg`` that is neither common nor one of :attr:`config_keys`.

    ``cfg`` holds the set keys only (None values dropped: not set). A key another registered model declares
    is named as such (``'eta' does not apply to click model 'dbn' (a key of pbm, ...)``), any other with
    its nearest known key; the message lists the model's known keys.

    Args:
      cfg: the simulation config's set keys (a mapping of name to value).

    Raises:
      ValueError: naming every unknown key.

    >>> get_click_model("dbn").check_config({"name": "dbn", "eta": 1.0})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: click_model: 'eta' does not apply to click model 'dbn' (a key of pbm, ubm, ...); known keys: eps, ...
    """
    known = sorted(set(COMMON_CONFIG_KEYS) | set(self.config_keys))
    unknown = [k for k in cfg if k not in known]
    if not unknown:
      return
    parts = []
    for k in unknown:
      owners = [name for name, cls in _REGISTRY.items() if k in cls.config_keys]
      if owners:
        parts.append(f"{k!r} does not apply to click model {self.name!r} (a key of {', '.join(owners)})")
      else:
        close = difflib.get_close_matches(str(k), known, n=1)
        parts.append(
          f"unknown key {k!r} for click model {self.name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
        )
    raise ValueError(f"click_model: {'; '.join(parts)}; known keys: {', '.join(known)}")

  def simulation_kwargs(self, cfg: Mapping[str, Any]) -> dict:
    """The keyword arguments of :meth:`session` from a (checked) simulation config.

    Args:
      cfg: the simulation config, a mapping (None values: not set, the default applies).

    Returns:
      dict of keyword arguments for :meth:`session` (the model's own parameters; empty for a model without any).
    """
    return {}

  def session(self, attraction: Array, *, where=None, positions=None, top_k=None, **kwargs) -> Session:
    """The model on ``[..., L]`` lists with attraction (click probability given examination) ``attraction``.

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off: items at positions ``>= top_k`` are not shown (None: all shown).
      **kwargs: the model's own parameters (:meth:`simulation_kwargs`).

    Returns:
      The model's ``Session`` (marginals, and samplers for the sequential models).

    Raises:
      NotImplementedError: here; a model with a simulator overrides it.
    """
    raise NotImplementedError(f"click model {self.name!r} has no simulator")

  def simulate(
    self,
    key: PRNGKey,
    attraction: Array,
    *,
    where: Optional[Array] = None,
    positions: Optional[Array] = None,
    top_k: Optional[int] = None,
    num_sessions: Optional[int] = None,
    num_impressions: Optional[int] = None,
    **kwargs,
  ) -> dict:
    """Samples clicks: the dict of :mod:`ultr_jax.simulation.click_models` (``clicks``, ``examination``, ...).

    Args:
      key: PRNG key.
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all); masked items never click.
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (``shown`` is returned); None: every valid item is shown.
      num_sessions: if set, a leading axis of that many independent sessions.
      num_impressions: if set, aggregated mode: ``clicks`` are CTRs over that many impressions (Binomial) and
        ``click_counts`` the counts.
      **kwargs: the model's own parameters, as :meth:`session`.

    Returns:
      dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob`` (sessions mode),
      ``click_counts`` (aggregated mode), ``shown`` (with ``top_k``) and the model's extras.
    """
    session = self.session(attraction, where=where, positions=positions, top_k=top_k, **kwargs)
    return session.output(key, num_sessions, num_impressions)

  # -- fitted side (logits) -------------------------------------------------

  @property
  def item_params(self) -> tuple[str, ...]:
    """Per-document fitted parameters besides ``attraction`` (a learner's extra outputs per item), the ones of
    :attr:`parameters` with shape ``("D",)``."""
    return tuple(k for k, p in self.parameters.items() if tuple(p.shape) == ("D",))

  def bias_shapes(self, num_ranks: int) -> dict[str, tuple[int, ...]]:
    """Shapes of the bias logits over ``num_ranks`` ranks (:attr:`parameters` besides the per-document ones).

    Args:
      num_ranks: ``L``, the number of ranks the tables cover.

    Returns:
      dict name -> shape tuple.

    Raises:
      ValueError: if the model is not fittable.
    """
    self._require_fittable()
    return {
      k: tuple(_dim(d, num_ranks) for d in p.shape) for k, p in self.parameters.items() if "D" not in tuple(p.shape)
    }

  def init(self, *, num_docs: int, list_size: int) -> dict:
    """Initial logits (zeros: every probability 1/2), sorted by name.

    Args:
      num_docs: ``D``, the number of documents (``attraction`` and the per-item parameters are ``[D]``).
      list_size: ``L``, the number of ranks of the bias tables.

    Returns:
      dict name -> ``float32`` zeros: ``attraction[D]``, each of :attr:`item_params` ``[D]`` and the bias
      logits of :meth:`bias_shapes`.

    Raises:
      ValueError: if the model is not fittable.
    """
    shapes: dict[str, tuple[int, ...]] = {k: (num_docs,) for k in ("attraction",) + self.item_params}
    shapes.update(self.bias_shapes(list_size))
    return {k: jnp.zeros(s, jnp.float32) for k, s in sorted(shapes.items())}

  def log_bias(self, bias_logits: Mapping[str, Array], items: Optional[Mapping[str, tuple]] = None) -> dict:
    """The log-probabilities :meth:`log_probs` reads, from the bias logits (``log_sigmoid`` of each) and the
    per-item ``items`` (``name -> (log p, log(1 - p))`` for each of :attr:`item_params`).

    Args:
      bias_logits: dict name -> logits of :meth:`bias_shapes`.
      items: dict name -> ``(log p, log(1 - p))`` ``[..., L]`` pairs of the per-item parameters (None: none;
        required when the model has :attr:`item_params`).

    Returns:
      dict name -> log-probabilities (``log_sigmoid`` of each bias logit).

    Raises:
      ValueError: if the model is not fittable or a per-item parameter is missing from ``items``.
    """
    self._require_fittable()
    missing = [k for k in self.item_params if items is None or k not in items]
    if missing:
      raise ValueError(f"{self.name}: {missing[0]}_logits are required (one per item)")
    return {k: jax.nn.log_sigmoid(jnp.asarray(v, jnp.float32)) for k, v in bias_logits.items()}

  def log_probs(
    self, clicks: Array, log_a: Array, log_1ma: Array, log_bias: Mapping[str, Array], *, ranks=None, where=None
  ) -> tuple[Array, Array]:
    r"""``(log q, log(1 - q))`` per item, :math:`q_i = P(C_i = 1 \mid c_{<i})`, items in displayed order.

    Args:
      clicks: ``float32[..., L]`` 0/1 clicks, in displayed order.
      log_a: ``[..., L]`` :math:`\log a` (the shape of ``clicks``).
      log_1ma: ``[..., L]`` :math:`\log(1 - a)`.
      log_bias: :meth:`log_bias`'s log-probabilities.
      ranks: ``int[..., L]`` 0-based ranks indexing the tables (None: the item index; ranks beyond a table use
        its last entry).
      where: ``bool[..., L]`` valid items.

    Returns:
      ``(log_q, log_1mq)``, each ``float32[..., L]``.

    Raises:
      NotImplementedError: here; a fittable model overrides it.
    """
    raise NotImplementedError(f"click model {self.name!r} has no likelihood")

  def log_probs_from_logits(
    self,
    clicks: Array,
    attraction_logits: Array,
    bias_logits: Mapping[str, Array],
    *,
    item_logits: Optional[Mapping[str, Array]] = None,
    ranks: Optional[Array] = None,
    where: Optional[Array] = None,
  ) -> tuple[Array, Array]:
    r"""``(log q, log(1 - q))`` per item from logits: :meth:`log_probs` of ``log_sigmoid`` of each.

    Every probability enters through ``log_sigmoid`` of its logit, so a learner (a fitted click model, a
    relevance tower as the attraction :math:`a_i = \sigma(s_i)`) stays in log space at any logit.

    Args:
      clicks: ``[..., L]`` 0/1 clicks, in displayed order.
      attraction_logits: ``[..., L]`` :math:`s`.
      bias_logits: the logits of :meth:`bias_shapes`.
      item_logits: ``{name: [..., L]}`` logits of the per-item parameters (:attr:`item_params`).
      ranks: ``int[..., L]`` 0-based ranks for the tables (default ``arange(L)``).
      where: ``bool[..., L]``.

    Returns:
      ``(log_q, log_1mq)``, each ``float32[..., L]``.

    >>> log_q, _ = get_click_model("dcm").log_probs_from_logits(
    ...     jnp.array([1.0, 0.0]), jnp.zeros(2), {"continuation": jnp.zeros(2)})
    >>> print(jnp.exp(log_q))  # a = 1/2; after the click the user goes on w.p. 1/2
    [0.5  0.25]
    """
    s = jnp.asarray(attraction_logits, jnp.float32)
    items = {}
    for k, v in (item_logits or {}).items():
      v = jnp.asarray(v, jnp.float32)
      items[k] = (jax.nn.log_sigmoid(v), jax.nn.log_sigmoid(-v))
    log_bias = self.log_bias(bias_logits, items)
    return self._full_log_probs(
      clicks, jax.nn.log_sigmoid(s), jax.nn.log_sigmoid(-s), log_bias, ranks=ranks, where=where
    )

  def _full_log_probs(self, clicks, log_a, log_1ma, log_bias, *, ranks=None, where=None):
    """:meth:`log_probs` with ``log_a``, ``log_1ma`` broadcast to the clicks and ``where`` filled in."""
    c = jnp.asarray(clicks, jnp.float32)
    log_a = jnp.broadcast_to(jnp.asarray(log_a, jnp.float32), c.shape)
    log_1ma = jnp.broadcast_to(jnp.asarray(log_1ma, jnp.float32), c.shape)
    return self.log_probs(c, log_a, log_1ma, log_bias, ranks=ranks, where=full_mask(c, where))

  def predict(self, clicks: Array, a: Array, params: Mapping[str, Array], *, where: Array) -> tuple[Array, Array]:
    r"""``(conditional, marginal)`` click probabilities from probabilities: ``a`` and the per-item parameters
    ``[..., L]`` (gathered per document), the bias tables indexed by the item's rank (= index).

    Args:
      clicks: ``float32[..., L]`` observed 0/1 clicks, in displayed order (the conditional reads the clicks
        above each item).
      a: ``[..., L]`` attraction probabilities.
      params: dict name -> probabilities: the per-item parameters ``[..., L]`` and the bias tables.
      where: ``bool[..., L]`` valid items.

    Returns:
      ``(conditional, marginal)``: :math:`P(C_i = 1 \mid c_{<i})` and :math:`P(C_i = 1)`, each ``[..., L]``.

    Raises:
      NotImplementedError: here; a fittable model overrides it.
    """
    raise NotImplementedError(f"click model {self.name!r} has no likelihood")

  def sample(self, key: PRNGKey, a: Array, params: Mapping[str, Array], *, where=None, num_sessions=None) -> Array:
    """Sessions drawn from the fitted parametrisation, items in displayed order.

    Args:
      key: PRNG key.
      a: ``[..., L]`` attraction probabilities.
      params: dict name -> probabilities, as :meth:`predict`.
      where: ``bool[..., L]`` valid items (None: all); masked items never click.
      num_sessions: if set, a leading axis of that many independent sessions.

    Returns:
      ``float32`` 0/1 clicks ``[..., L]`` (``[S, ..., L]`` with ``num_sessions``).

    Raises:
      NotImplementedError: here; a model with a sampler overrides it.
    """
    raise NotImplementedError(f"click model {self.name!r} has no sampler in its fitted parametrisation")

  def to_probabilities(self, logits: Mapping[str, Array]) -> dict:
    """The fitted logits as probabilities (``sigmoid``).

    Args:
      logits: dict name -> logits (:meth:`init`'s layout).

    Returns:
      dict name -> probabilities, the same keys and shapes.
    """
    return {k: jax.nn.sigmoid(v) for k, v in logits.items()}

  def to_logits(self, params: Mapping[str, Array]) -> dict:
    """Probabilities to logits (+-inf at 1 and 0, which ``log_sigmoid`` maps back exactly).

    Args:
      params: dict name -> probabilities in [0, 1].

    Returns:
      dict name -> ``float32`` logits, the same keys and shapes.
    """
    return {k: jax.scipy.special.logit(jnp.asarray(v, jnp.float32)) for k, v in params.items()}

  def session_log_likelihood(self, logits: Mapping[str, Array], doc_ids: Array, clicks: Array, where) -> Array:
    r"""Session log-likelihoods ``[..., L] -> [...]`` from the logits, in log space: ``log_sigmoid`` of the
    parameter vectors once, then a gather per item (rather than ``log_sigmoid`` of every gathered item).

    Args:
      logits: dict name -> fitted logits (:meth:`init`'s layout).
      doc_ids: ``int[..., L]`` document ids, in displayed order (clipped to the table).
      clicks: ``float32[..., L]`` 0/1 clicks.
      where: ``bool[..., L]`` valid items (None: all).

    Returns:
      ``float32[...]``: :math:`\sum_i \log P(c_i \mid c_{<i})` of each session.
    """
    log_a, log_1ma, log_bias = self._gathered_logs(logits, doc_ids)
    log_q, log_1mq = self._full_log_probs(clicks, log_a, log_1ma, log_bias, where=where)
    return bernoulli_log_likelihood(clicks, log_q, log_1mq, where=where)

  def _gathered_logs(self, logits, doc_ids):
    """``(log a, log(1 - a), log_bias)`` of the items ``doc_ids`` (ids clipped to the table)."""
    ids = jnp.clip(jnp.asarray(doc_ids, jnp.int32), 0, logits["attraction"].shape[0] - 1)
    log_a = jax.nn.log_sigmoid(logits["attraction"])[ids]
    log_1ma = jax.nn.log_sigmoid(-logits["attraction"])[ids]
    docs = ("attraction",) + tuple(self.item_params)
    bias = {k: v for k, v in logits.items() if k not in docs}
    items = {k: (jax.nn.log_sigmoid(logits[k])[ids], jax.nn.log_sigmoid(-logits[k])[ids]) for k in self.item_params}
    return log_a, log_1ma, self.log_bias(bias, items)

  def _require_fittable(self):
    if not self.fittable:
      raise ValueError(f"click model {self.name!r} is not fittable; expected one of {click_models('fittable')}")


def item_log_likelihood(log_q: Array, log_1mq: Array, counts: Array) -> Array:
  r""":math:`\sum_r k_r \log q_r + (n_r - k_r) \log(1 - q_r)` of item records (``counts[:, 0]`` impressions
  :math:`n`, ``counts[:, 1]`` clicks :math:`k`; a zero count adds 0 even at an infinite log)."""
  n, k = counts[:, 0], counts[:, 1]
  return jnp.sum(jnp.where(k > 0, k * log_q, 0.0) + jnp.where(n - k > 0, (n - k) * log_1mq, 0.0))


class ItemStatistics:
  """Mixin of the models with independent clicks given the document and rank (PBM, trust): impressions and
  clicks per (document, rank), :func:`item_log_likelihood` with the model's :meth:`ClickModel.log_probs`."""

  statistics_kind: ClassVar[str] = "items"

  def sufficient_statistics(self, doc_ids, clicks, where=None):
    return item_statistics(doc_ids, clicks, where)

  def statistics_accumulator(self):
    return ItemCounter()

  def statistics_log_likelihood(self, logits, keys, counts):
    assert isinstance(self, ClickModel)  # a mixin of click models
    log_a, log_1ma, log_bias = self._gathered_logs(logits, keys[:, 0])
    log_q, log_1mq = self.log_probs(jnp.zeros(keys.shape[:1]), log_a, log_1ma, log_bias, ranks=keys[:, 1])
    return item_log_likelihood(log_q, log_1mq, counts)


# ----------------------------------------------------------------------------
# Optional capabilities (checked with isinstance by the callers that need them).


@runtime_checkable
class ClickChain(Protocol):
  """A click chain: the user examines the ranks in order and goes on with probability :math:`c^0` after no click
  and :math:`c^1` after a click (the cascade family, :class:`~ultr_jax.simulation.ChainModel`)."""

  def continuations(self, attraction: Array, **params) -> tuple[Array, Array]:
    """``(c0, c1)``, each ``[..., L]``, from the attraction ``[..., L]`` and the model's own parameters."""
    ...


@runtime_checkable
class StatisticsReduction(Protocol):
  r"""A reduction of sessions to weighted records whose likelihood equals the sessions' (host side, NumPy).

  ``sufficient_statistics(doc_ids [B, L], clicks [B, L], where)`` reduces one batch to a :class:`ClickStatistics`
  of kind ``statistics_kind`` (mergeable across batches by
  :func:`~ultr_jax.simulation.merge_click_statistics`); ``statistics_accumulator()`` makes a fresh accumulator
  over batches (``add(doc_ids, clicks, where)``, then ``result()``); ``statistics_log_likelihood(logits, keys,
  counts)`` is the log-likelihood of the log the records ``keys [R, K]``, ``counts [R, V]`` reduce.
  """

  statistics_kind: ClassVar[str]

  def sufficient_statistics(self, doc_ids: np.ndarray, clicks: np.ndarray, where=None) -> ClickStatistics: ...

  def statistics_accumulator(self) -> Any: ...

  def statistics_log_likelihood(self, logits: Mapping[str, Array], keys: Array, counts: Array) -> Array: ...


@runtime_checkable
class BiasIndexed(StatisticsReduction, Protocol):
  r"""A reduction whose item records each read exactly one bias parameter.

  ``statistics_bias_index(bias, keys [R, K]) -> int32[R]`` is the index each record reads into the bias logits
  flattened in sorted name order (``jax.flatten_util.ravel_pytree(bias)``). The bias's Hessian is then diagonal and
  its coupling to a document is one number per record, which the partitioned fit
  (:mod:`~ultr_jax.simulation.partitioned_fit`) uses to eliminate the documents in a few passes over the records.
  """

  def statistics_bias_index(self, bias: Mapping[str, Array], keys: Array) -> Array: ...


@runtime_checkable
class SessionChecker(Protocol):
  """A model that gives some click patterns probability zero (the cascade model: at most one click)."""

  def check_sessions(self, clicks: np.ndarray, where: np.ndarray) -> None:
    """Raises ValueError naming the first session of ``clicks [B, L]`` (``where``: valid items) it cannot explain."""
    ...


@runtime_checkable
class OwnClickFunction(Protocol):
  """A model whose simulator reads more of the batch than :meth:`ClickModel.session` takes (per-query parameters,
  renamed inputs): :func:`~ultr_jax.simulation.make_click_fn` returns its ``click_function(cfg)`` (position_trust)
  instead of the standard :class:`~ultr_jax.simulation.ClickSimulator`."""

  def click_function(self, cfg: Mapping[str, Any]) -> ClickFn:
    """``click_fn(key, batch) -> dict`` for the (checked) simulation config ``cfg``."""
    ...


@runtime_checkable
class LogSampler(Protocol):
  """A model whose simulated logs (:func:`~ultr_jax.simulation.simulate_session_log`) are drawn otherwise than by
  :meth:`ClickModel.simulate` (the PBM: ULTRA's eye-tracking examination table)."""

  def session_sampler(self, key: PRNGKey, attraction: Array, **kwargs) -> dict:
    """:meth:`ClickModel.simulate`'s dict for the attraction ``[..., L]``."""
    ...


@dataclasses.dataclass(frozen=True)
class PatternStatistics:
  r"""The reduction of a model without one of its own: the distinct (document list, click vector, mask) patterns
  with their session counts (``click_models.statistics.pattern_statistics``), exact for every model, and
  :math:`\sum_r n_r \log P_\theta(c_r)` (:meth:`ClickModel.session_log_likelihood`) on them.

  >>> s = statistics_reduction(get_click_model("dbn")).sufficient_statistics(
  ...     np.array([[0, 1], [0, 1]]), np.array([[1, 0], [1, 0]]))
  >>> s.kind, s.num_records, s.num_sessions
  ('patterns', 1, 2.0)
  """

  model: ClickModel
  statistics_kind: ClassVar[str] = "patterns"

  @property
  def name(self) -> str:
    return self.model.name

  def sufficient_statistics(self, doc_ids, clicks, where=None) -> ClickStatistics:
    return pattern_statistics(doc_ids, clicks, where)

  def statistics_accumulator(self) -> RecordMerger:
    return RecordMerger(self.sufficient_statistics)

  def statistics_log_likelihood(self, logits, keys, counts):
    ids, clicks, where = pattern_sessions(keys)
    ll = self.model.session_log_likelihood(logits, ids, clicks.astype(jnp.float32), where)
    return jnp.sum(counts[:, 0] * ll)


def statistics_reduction(model: ClickModel) -> StatisticsReduction:
  """The model's own :class:`StatisticsReduction`, or its session patterns' (:class:`PatternStatistics`).

  Args:
    model: a fittable click model.

  Returns:
    ``model`` itself where it is a :class:`StatisticsReduction`, else ``PatternStatistics(model)``.

  >>> [statistics_reduction(get_click_model(m)).statistics_kind for m in ("pbm", "ubm", "dbn")]
  ['items', 'ubm_items', 'patterns']
  """
  return model if isinstance(model, StatisticsReduction) else PatternStatistics(model)
