"""Issue 45's classes: each bad input is refused before any work with an error naming what is wrong.

(a) config values (one schema for ``train.fit`` and the studies), (b) labels, (c) degenerate data,
(d) run-state and side files, (e) conversions, (f) off-policy estimates and their intervals.
"""

import re

import pytest

from ultr_jax import data, studies, train

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
