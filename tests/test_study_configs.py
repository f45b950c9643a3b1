"""Every study's configs ship with the package: each variant exists, is strict, and is what its binary runs."""

import importlib.util
import re
import subprocess
import sys
import pathlib

import pytest

from ultr_jax import studies
from ultr_jax._schema import rule_paths

ROOT = pathlib.Path(__file__).resolve().parent.parent
CASES = [(name, variant) for name in sorted(studies.STUDIES) for variant in studies.variants(name)]


def _binary_config(name, arg):
  spec = importlib.util.spec_from_file_location(
    f"{name}_binary_config", ROOT / "experiments" / name / "configs" / "default.py"
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


@pytest.mark.parametrize("name", sorted(studies.STUDIES))
def test_every_study_has_a_default_and_a_smoke_variant(name):
  assert studies.variants(name)[0] == "default" and "smoke" in studies.variants(name)
  with pytest.raises(ValueError, match=rf"unknown config variant 'larg' of study '{name}'; expected one of"):
    studies.default_config(name, "larg")


@pytest.mark.parametrize("name,variant", CASES)
def test_default_config_is_strict_and_is_the_binarys(name, variant):
  config = studies.default_config(name, variant)
  assert config.is_locked
  with pytest.raises(AttributeError, match='Key "num_seedz" does not exist'):
    config.num_seedz = 2
  binary = _binary_config(name, "" if variant == "default" else variant)
  assert repr(binary) == repr(config)  # the binary's config file holds no second copy
  assert studies.default_config(name, variant) is not config  # a fresh copy each call


def test_unknown_study_is_named():
  with pytest.raises(ValueError, match="unknown study 'lbdd'"):
    studies.default_config("lbdd")


# ----------------------------------------------------------------------------
# Values: every field a study reads has a declared range, checked before any work.

RULES = [(name, path) for name in sorted(studies.STUDIES) for path in studies.get(name).CONFIG_RULES]


def _set(config, field, value):
  *parents, leaf = field.split(".")
  node = config
  for p in parents:
    node = node[p]
  node[leaf] = value


@pytest.mark.parametrize("name", sorted(studies.STUDIES))
def test_every_variant_passes_its_rules_and_every_rule_names_a_field(name):
  matched = set()
  for variant in studies.variants(name):
    config = studies.default_config(name, variant)
    studies.validate_config(name, config)
    for path in studies.get(name).CONFIG_RULES:
      if list(rule_paths(config, path)):
        matched.add(path)
  assert matched == set(studies.get(name).CONFIG_RULES)  # no rule for a field the study does not have


@pytest.mark.parametrize("name,path", RULES, ids=[f"{n}:{p}" for n, p in RULES])
def test_a_value_out_of_range_is_refused_naming_the_field(name, path):
  rule = studies.get(name).CONFIG_RULES[path]
  config = next(c for v in studies.variants(name) if list(rule_paths(c := studies.default_config(name, v), path)))
  field, _ = next(rule_paths(config, path))
  _set(config, field, rule.bad)
  bad = next(rule_paths(config, field))[1]  # as the config holds it (an int in a float field is a float)
  with pytest.raises(ValueError, match=re.escape(f"config.{field}: {bad!r} is out of range; expected {rule.allowed}")):
    studies.validate_config(name, config)


def test_a_binary_stops_on_a_value_out_of_range_before_any_work(tmp_path, subprocess_env):
  """Zero sessions used to exit 0 with a perplexity of 0.0; now the binary stops naming the field."""
  proc = subprocess.run(
    [
      sys.executable,
      str(ROOT / "experiments" / "click_models" / "main.py"),
      f"--config={ROOT / 'experiments' / 'click_models' / 'configs' / 'default.py'}:smoke",
      "--config.num_sessions=0",
      f"--workdir={tmp_path}",
    ],
    capture_output=True,
    text=True,
    env=subprocess_env,
    timeout=300,
  )
  assert proc.returncode != 0
  assert "config.num_sessions: 0 is out of range; expected an integer >= 1" in proc.stderr
  assert not (tmp_path / "results.json").exists()
