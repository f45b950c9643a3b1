"""Every study's configs ship with the package: each variant exists, is strict, and is what its binary runs."""

import importlib.util
import pathlib

import pytest

from ultr_jax import studies

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
