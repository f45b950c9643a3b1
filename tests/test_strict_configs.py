"""Strict configs: an unknown key stops with an error naming it (fit, every method, every binary's flags);
every ``--config.`` flag the README and CONTRIBUTING document parses; methods declare their batch inputs."""

import pathlib
import re

from absl import flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np
import pytest

from ultr_jax import data
from ultr_jax import simulation
from ultr_jax.simulation.click_models.base import COMMON_CONFIG_KEYS
from ultr_jax.train import available_methods, default_train_config, fit, get_method, method_defaults
from ultr_jax.train.config import merge_config
from ultr_jax.train.method import method_inputs_missing
from ultr_jax.train.methods.lbd import make_lbd, make_lbd_grid
from ultr_jax.train.methods.sif import make_sif_method

ROOT = pathlib.Path(__file__).resolve().parent.parent
BINARIES = sorted(p.parent.parent.name for p in (ROOT / "experiments").glob("*/configs/default.py"))


def _method_config(name):
  return {"lams": [0.0, 1.0], "ts": [0.0, 0.1]} if name == "lbd_grid" else {}


# ----------------------------------------------------------------------------
# The merge helper, fit and the methods.


def test_merge_config_names_every_unknown_key_and_lists_the_known():
  with pytest.raises(ValueError) as e:
    merge_config({"steps": 1, "batch_size": 2}, {"stepz": 3, "colour": 1}, what="cfg")
  msg = str(e.value)
  assert "'stepz' (did you mean 'steps'?)" in msg and "'colour'" in msg and "known keys: batch_size, steps" in msg
  assert merge_config({"a": 1, "b": None}, {"b": 2}).to_dict() == {"a": 1, "b": 2}
  assert merge_config({"a": 1}, {"a": None}, none_is_default=True).a == 1
  assert merge_config({"a": 1}, {"a": None}).a is None


def test_fit_refuses_a_misspelt_config_key():
  splits = data.make_synthetic(num_train=8, num_valid=2, num_test=2, list_size=4, num_features=3)
  m = get_method("naive", {"ranker": "linear"}, num_features=3, list_size=4)
  with pytest.raises(ValueError, match=r"unknown key 'stepz' \(did you mean 'steps'\?\)"):
    fit(m, splits.train, config={"stepz": 3})


@pytest.mark.parametrize("name", available_methods())
def test_every_method_refuses_a_misspelt_key_and_takes_its_declared_ones(name):
  cfg = _method_config(name)
  with pytest.raises(ValueError, match=rf"method '{name}' config: unknown key 'max_weigth'"):
    get_method(name, {**cfg, "max_weigth": 10}, num_features=3, list_size=4)
  declared = method_defaults(name)
  m = get_method(name, {**declared.to_dict(), **cfg}, num_features=3, list_size=4)
  assert set(m.config) == set(declared)  # the full config, for the run's fingerprint


def test_ips_misspelt_clip_is_refused_not_ignored():
  with pytest.raises(ValueError, match="'max_weigth'.*known keys:.*propensity_clip"):
    get_method("ips", {"max_weigth": 10}, num_features=3, list_size=4)
  m = get_method("ips", {"propensity_clip": 0.1, "ranker": "linear"}, num_features=3, list_size=4)
  assert m.config["propensity_clip"] == 0.1


def test_a_method_refuses_a_field_it_does_not_read():
  """Each method declares only what it reads: naive has no propensities to clip, the IPS oracle no penalty."""
  for name, field in [
    ("naive", "propensity_clip"),
    ("naive", "num_positions"),
    ("full_info", "num_positions"),
    ("ips_trust_oracle", "lambda_D"),
    ("heckman_rank", "hidden_sizes"),
  ]:
    with pytest.raises(ValueError, match=rf"method '{name}' config: unknown key '{field}'"):
      get_method(name, {field: 1}, num_features=3, list_size=4)


def test_the_factories_called_directly_are_strict():
  with pytest.raises(ValueError, match=r"method 'lbd' config: unknown key 'lamb' \(did you mean 'lam'\?\)"):
    make_lbd({"lamb": 1.0}, num_features=3, list_size=4)
  with pytest.raises(ValueError, match=r"method 'lbd_lips' config: unknown key 'norm_position'"):
    make_lbd({"norm_position": "before"}, num_features=3, list_size=4, name="lbd_lips")
  with pytest.raises(ValueError, match=r"method 'lbd_grid' config: unknown key 'lam'"):  # the grid takes lams
    make_lbd_grid({"lams": [0.0], "ts": [0.0], "lam": 1.0}, num_features=3, list_size=4)
  with pytest.raises(ValueError, match=r"method 'sif_full' config: unknown key 'lambda_e' \(did you mean 'lambda_E'"):
    make_sif_method("sif_full", {"lambda_e": 1.0}, num_features=3, list_size=4)
  # their declared fields and None ("the default") still pass
  assert make_lbd({"lam": 1.0, "t": None}, num_features=3, list_size=4).name == "lbd"
  assert make_sif_method("sif_full", {"risk": None}, num_features=3, list_size=4).name == "sif_full"


def _batch(keys, b=2, length=4, f=3):
  out = {"features": jnp.ones((b, length, f)), "where": jnp.ones((b, length), bool)}
  for k in keys:
    if k == "shown":
      out[k] = jnp.ones((b, length), bool).at[:, -1].set(False)
    elif k == "runs":
      out[k] = {"clicks": jnp.zeros((1, b, length))}
    else:
      out[k] = jnp.full((b, length), 0.5)
  return out


@pytest.mark.parametrize("name", available_methods())
def test_requires_is_what_the_loss_reads(name):
  """A batch with exactly ``requires`` (and features, where) trains; without any one of them the loss fails."""
  linear = {"ranker": "linear"} if "ranker" in method_defaults(name) else {}
  m = get_method(name, {**_method_config(name), **linear}, num_features=3, list_size=4)
  batch = _batch(m.requires)
  key = jax.random.key(0)
  params, extra = jax.eval_shape(m.init, key, batch)
  jax.eval_shape(m.loss, params, extra, batch, key)  # traces
  assert method_inputs_missing(m, batch) is None
  for k in m.requires:
    partial = {kk: v for kk, v in batch.items() if kk != k}
    assert method_inputs_missing(m, partial) == k
    with pytest.raises((KeyError, ValueError)):
      p, e = jax.eval_shape(m.init, key, partial)
      jax.eval_shape(m.loss, p, e, partial, key)


def test_requires_follows_the_config():
  ips = get_method("ips", {"propensities": (1.0, 0.5, 0.3, 0.2)}, num_features=3, list_size=4)
  assert ips.requires == ("clicks",)  # the table stands in for the oracle examination
  affine = get_method("affine", {"propensities": (1.0, 0.5, 0.3, 0.2)}, num_features=3, list_size=4)
  assert affine.requires == ("clicks", "eps_plus", "eps_minus")


# ----------------------------------------------------------------------------
# The binaries' flags.


def _parse(binary, *flag_args, arg=""):
  """The binary's config after absl parses ``--config=<its default.py> *flag_args`` (as its main.py does)."""
  path = ROOT / "experiments" / binary / "configs" / "default.py"
  argv = ["prog", f"--config={path}" + (f":{arg}" if arg else ""), *flag_args]
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, flag_values=fv, lock_config=True, sys_argv=argv)
  fv(argv)
  return fv.config


def _has_path(config, path):
  node = config
  for part in path.split("."):
    if not hasattr(node, "keys") or part not in node.keys():
      return False
    node = node[part]
  return True


def _documented_flags():
  """``(key, value or None)`` of every ``--config.<key>[=<value>]`` in README.md, CONTRIBUTING.md and the docs."""
  out = set()
  pattern = re.compile(r"--config\.([A-Za-z0-9_.<>]+)(?:=(\"[^\"]*\"|'[^']*'|[^\s`'\"]+))?")
  docs = sorted(p.relative_to(ROOT) for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)
  for doc in ["README.md", "CONTRIBUTING.md", *docs]:
    for key, value in pattern.findall((ROOT / doc).read_text()):
      key = key.rstrip(".")
      value = value.strip("'\"") if value else None
      if value is not None and ("..." in value or value.count("(") != value.count(")") or "<" in value):
        value = None  # a placeholder in the prose: the key alone is checked
      out.add((key, value))
  return sorted(out, key=lambda kv: (kv[0], kv[1] or ""))


@pytest.fixture(scope="module")
def binary_configs():
  return {b: _parse(b) for b in BINARIES}


DOCUMENTED = _documented_flags()


def test_the_docs_document_flags():
  assert len(DOCUMENTED) > 40
  assert ("method_configs.ips.propensities", None) in DOCUMENTED


@pytest.mark.parametrize("key,value", DOCUMENTED, ids=[f"{k}={v}" for k, v in DOCUMENTED])
def test_documented_flag_is_accepted(key, value, binary_configs):
  owners = []
  for b, config in binary_configs.items():
    k = key
    if "<bias>" in k and _has_path(config, "bias_configs"):
      k = k.replace("<bias>", sorted(config.bias_configs.keys())[0])
    if _has_path(config, k):
      owners.append((b, k))
  assert owners, f"--config.{key} is documented but no binary's config has it ({BINARIES})"
  if value is None:
    return
  errors = []
  for b, k in owners:
    try:
      _parse(b, f"--config.{k}={value}")
      return
    except Exception as e:  # noqa: BLE001 - report every binary's reason
      errors.append(f"{b}: {e}")
  pytest.fail(f"--config.{key}={value} parses in no binary: {errors}")


@pytest.mark.parametrize("binary", BINARIES)
def test_misspelt_flag_is_refused_by_every_binary(binary):
  with pytest.raises(Exception, match="stepz|seedz"):
    _parse(binary, "--config.train.stepz=3" if _has_path(_parse(binary), "train") else "--config.seedz=3")


def test_documented_method_fields_reach_get_method():
  """``--config.method_configs.ips.propensities`` (README) parses and builds IPS with the table."""
  config = _parse("baselines", "--config.method_configs.ips.propensities=(1.0,0.7,0.5,0.4,0.3,0.25,0.2,0.2,0.2,0.1)")
  m = get_method("ips", config.method_configs.ips, num_features=3, list_size=10)
  assert m.requires == ("clicks",) and m.config["propensities"][1] == 0.7
  with pytest.raises(Exception, match="propensitys"):
    _parse("baselines", "--config.method_configs.ips.propensitys=(1.0,)")


def test_train_config_restart_and_on_divergence_flags():
  config = _parse("baselines", "--config.train.restart=True", "--config.train.on_divergence=mark")
  assert config.train.restart is True and config.train.on_divergence == "mark"
  assert set(default_train_config()) <= set(config.train)
  np.testing.assert_equal(config.train.learning_rate, 3e-3)


# ----------------------------------------------------------------------------
# Click-model configs: each model takes the common keys and its own (``eta`` only where there is a position
# table); None is "not set", so a binary's section can switch ``name`` alone.

#: The keys a model cannot build without (not part of what is tested here).
_REQUIRED = {"context_pbm": {"num_contexts": 2}, "individual": {"crux_indices": (0,), "w": (0.1,)}}


def _simulator(cfg):
  return simulation.make_click_fn(cfg).__self__  # the frozen simulator: equal configs give equal ones


def test_eta_belongs_to_the_models_with_a_position_table():
  takes_eta = {m for m in simulation.click_models() if "eta" in simulation.get_click_model(m).config_keys}
  assert takes_eta == {"pbm", "ubm", "trust", "pbm_table", "context_pbm", "individual", "position_trust"}
  assert "eta" not in COMMON_CONFIG_KEYS


@pytest.mark.parametrize("name", simulation.click_models())
def test_click_model_config_takes_only_its_declared_keys(name):
  model = simulation.get_click_model(name)
  required = _REQUIRED.get(name, {})
  with pytest.raises(ValueError, match=rf"unknown key 'etaa' for click model '{name}'.*; known keys: .*top_k"):
    simulation.make_click_fn({"name": name, "etaa": 1.0, **required})
  declared = set(COMMON_CONFIG_KEYS) | set(model.config_keys)
  if "eta" in declared:
    assert _simulator({"name": name, "eta": 2.0, **required}) != _simulator({"name": name, **required})
  else:
    with pytest.raises(ValueError, match=rf"'eta' does not apply to click model '{name}' \(a key of pbm, ubm"):
      simulation.make_click_fn({"name": name, "eta": 1.0, **required})
  # None is "not set": the default applies, for any key
  assert _simulator({"name": name, "eta": None, "top_k": None, **required}) == _simulator({"name": name, **required})


@pytest.mark.parametrize("name", simulation.click_models())
def test_baselines_click_model_switches_by_name_alone(name):
  """``--config.click_model.name=<m>`` builds every model; ``--config.click_model.eta`` reaches the models that
  take it and stops the others with an error naming it."""
  required = _REQUIRED.get(name, {})
  config = _parse("baselines", f"--config.click_model.name={name}")
  default = _simulator({**config.click_model.to_dict(), **required})
  with_eta = {**_parse("baselines", f"--config.click_model.name={name}", "--config.click_model.eta=2.0").click_model}
  if "eta" in simulation.get_click_model(name).config_keys:
    assert _simulator({**with_eta, **required}) != default
  else:
    with pytest.raises(ValueError, match=rf"'eta' does not apply to click model '{name}'"):
      simulation.make_click_fn({**with_eta, **required})
