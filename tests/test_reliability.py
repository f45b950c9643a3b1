"""Issue 45's classes: each bad input is refused before any work with an error naming what is wrong.

(a) config values (one schema for ``train.fit`` and the studies), (b) labels, (c) degenerate data,
(d) run-state and side files, (e) conversions, (f) off-policy estimates and their intervals.
"""

import dataclasses
import re

import jax.numpy as jnp
import numpy as np
import pytest

from ultr_jax import data, graph, metrics, studies, train

SPLITS = data.make_synthetic(num_train=8, num_valid=4, num_test=4, list_size=3, num_features=2)

# ----------------------------------------------------------------------------
# (a) Config values: train.fit checks the same declared ranges as the binaries, before any work.


@pytest.mark.parametrize(
  "field,value,allowed",
  [
    ("steps", -5, "an integer >= 1"),
    ("learning_rate", -0.1, "a number >= 0"),
    ("batch_size", 0, "an integer >= 1"),
    ("eval_every", -1, "an integer >= 0"),
    ("eval_batch_size", 0, "an integer >= 1"),
    ("max_to_keep", 0, "an integer >= 1"),
    ("progress", 1, "a bool"),
    ("learning_rate", float("nan"), "a number >= 0"),
  ],
)
def test_fit_refuses_a_value_out_of_range_before_any_work(field, value, allowed):
  method = train.get_method("naive", {"ranker": "linear"}, num_features=2, list_size=3)
  with pytest.raises(ValueError, match=re.escape(f"config.{field}: {value!r} is out of range; expected {allowed}")):
    train.fit(method, SPLITS.train, SPLITS.valid, config={field: value})


def test_the_studies_train_sections_use_the_same_declaration():
  rules = studies.get("lbd").CONFIG_RULES
  for field, rule in train.TRAIN_CONFIG_RULES.items():
    if f"train.{field}" in rules:
      assert rules[f"train.{field}"] is rule


def _study_config(name, **fields):
  config = studies.default_config(name, "smoke")
  config.unlock()
  for k, v in fields.items():
    config[k] = v
  return config


@pytest.mark.parametrize(
  "name,fields,message",
  [
    ("ope", {"estimators": ()}, "config.estimators: () is out of range; expected a sequence of at least 1 of"),
    (
      "click_models",
      {"fit_models": (), "ctr_models": ()},
      "config.fit_models and config.ctr_models are both empty: the study has nothing to do",
    ),
    ("ope", {"label_fractions": (0.0, 0.0)}, "config.label_fractions: (0.0, 0.0) is out of range"),
    ("click_models", {"label_fractions": (0.0, 0.0)}, "config.label_fractions: (0.0, 0.0) is out of range"),
  ],
)
def test_a_study_with_nothing_to_do_says_so(tmp_path, name, fields, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    studies.run(name, _study_config(name, **fields), str(tmp_path))
  assert not (tmp_path / "results.json").exists()


# ----------------------------------------------------------------------------
# (b) Labels: finite and non-negative where they enter a dataset or a metric; model selection never on NaN.


@pytest.mark.parametrize("value,shown", [(float("nan"), "nan"), (-1.0, "-1.0"), (float("inf"), "inf")])
def test_a_bad_label_is_refused_naming_its_list_and_position(value, shown):
  labels = SPLITS.valid.labels.copy()
  labels[2, 1] = value
  qid = SPLITS.valid.qid[2]
  with pytest.raises(ValueError, match=re.escape(f"RankingDataset.labels: list 2 (qid {qid}), position 1 is {shown}")):
    dataclasses.replace(SPLITS.valid, labels=labels)
  scores = jnp.asarray(SPLITS.valid.features[..., 0])
  for metric in (metrics.ndcg, metrics.dcg, metrics.err, metrics.mrr):
    with pytest.raises(ValueError, match=re.escape(f"metric labels: list 2, position 1 is {shown}")):
      metric(scores, jnp.asarray(labels), where=jnp.asarray(SPLITS.valid.where))


def test_a_bad_label_at_padding_is_not_read():
  labels, where = np.array([[1.0, -1.0]]), np.array([[True, False]])
  assert float(metrics.ndcg(jnp.array([[1.0, 0.0]]), labels, where=where)) == pytest.approx(1.0)


@pytest.mark.parametrize("diverged,refused", [((False, False), [1]), ((False, True), None), ((True, False), [1])])
def test_a_non_finite_selection_metric_is_refused_unless_the_seed_is_marked_diverged(diverged, refused):
  values, check = np.array([0.5, np.nan]), train.divergence.check_selection_metric
  if refused is None:
    check(values, "ndcg@10", seeds=(3, 4), diverged=np.array(diverged))
    return
  with pytest.raises(ValueError, match=re.escape("validation ndcg@10 is not finite for seed(s) [4]")):
    check(values, "ndcg@10", seeds=(3, 4), diverged=np.array(diverged))


@pytest.mark.slow
def test_model_selection_refuses_a_non_finite_validation_metric():
  features = SPLITS.valid.features.copy()
  features[1, 0, 0] = np.nan  # a NaN score on a valid item: that list's nDCG is NaN
  valid = dataclasses.replace(SPLITS.valid, features=features)
  method = train.get_method("naive", {"ranker": "linear"}, num_features=2, list_size=3)
  train_set = dataclasses.replace(SPLITS.train, extras={"clicks": (SPLITS.train.labels >= 2).astype(np.float32)})
  config = {"steps": 2, "batch_size": 4, "eval_every": 2, "progress": False, "steps_per_call": 1}
  with pytest.raises(ValueError, match=r"validation ndcg@10 is not finite for seed\(s\) \[0\]"):
    train.fit(method, train_set, valid, config=config)


# ----------------------------------------------------------------------------
# (c) Degenerate inputs: named before the work.


@pytest.mark.parametrize(
  "change,message",
  [
    ({"num_features": 0}, "the lists have no features: there is nothing to rank by"),
  ],
)
def test_the_baselines_study_names_degenerate_data(tmp_path, change, message):
  config = studies.default_config("baselines", "smoke")
  for k, v in change.items():
    config.data[k] = v
  with pytest.raises(ValueError, match=re.escape(f"config.data (source 'synthetic', the train split): {message}")):
    studies.run("baselines", config, str(tmp_path))


def test_a_split_without_positive_labels_is_named():
  from ultr_jax.studies import experiment  # noqa: PLC0415

  config = studies.default_config("baselines", "smoke")
  zero = dataclasses.replace(SPLITS.test, labels=np.zeros_like(SPLITS.test.labels))
  with pytest.raises(ValueError, match=re.escape("the test split): no document has a positive label")):
    experiment._check_not_degenerate(config.data, "test", zero, positives=True)


@pytest.mark.parametrize(  # ctr (biased) reads CTRs, not interventions; all_pairs' L-BFGS compiles for ~10 s
  "method", [pytest.param("all_pairs", marks=pytest.mark.slow), "pivot", "adjacent_chain"]
)
def test_lists_of_one_document_identify_the_pivot_only(method):
  items, clicks = np.array([[0], [1], [2]]), np.array([[1.0], [0.0], [1.0]])
  est = graph.harvest_propensities(items, np.zeros((3, 1), int), clicks, method=method)
  assert np.asarray(est.identified).tolist() == [True] and np.asarray(est.propensities).tolist() == [1.0]
  with pytest.raises(ValueError, match=r"factors \[1\] are not identified .*every list holds at most one document"):
    graph.harvest_propensities(items, np.array([[0], [1], [1]]), clicks, method=method)


@pytest.mark.parametrize(
  "arrow_type,qid",
  [("uint64", 2**64 - 1), ("uint64", 2**63), ("int64", -(2**63))],
)
def test_an_id_beyond_the_id_type_is_refused_never_wrapped(tmp_path, arrow_type, qid):
  pa = pytest.importorskip("pyarrow")
  feather = pytest.importorskip("pyarrow.feather")
  path = tmp_path / "page.feather"
  table = {"query_id": pa.array([qid] * 2, getattr(pa, arrow_type)()), "position": [1, 2], "click": [0, 1]}
  feather.write_feather(pa.table({**table, "label": [0, 1], "bm25": [0.1, 0.2]}), str(path))
  if arrow_type == "int64":  # in range: read as itself
    assert data.load_baidu_ultr(path, features=("bm25",)).qid.tolist() == [qid]
    return
  with pytest.raises(ValueError, match=re.escape(f"row 0, field 'query_id': {qid} is outside the int64 id range")):
    data.load_baidu_ultr(path, features=("bm25",))
