"""Setup for ultr_jax: unbiased learning to rank in JAX."""

import os
import re

from setuptools import find_packages, setup

_HERE = os.path.dirname(os.path.abspath(__file__))


def _version():
  with open(os.path.join(_HERE, "ultr_jax", "__init__.py")) as f:
    return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


setup(
  name="ultr_jax",
  version=_version(),
  description=(
    "Unbiased learning to rank in JAX: identifiability checks, biased"
    " click simulation, and debiasing methods (IPS, DLA, REM, LBD, CLD,"
    " SIF) with reproducible experiments."
  ),
  long_description=open(os.path.join(_HERE, "README.md")).read(),
  long_description_content_type="text/markdown",
  packages=[*find_packages(include=["ultr_jax", "ultr_jax.*"]), "ultr_jax.expected_metrics"],
  # The checked-in expected metrics (expected_metrics/*.json at the repository root) ship inside the package, as
  # ultr_jax/expected_metrics/, so `python -m ultr_jax.testing` works from a wheel (ultr_jax.testing finds both).
  package_dir={"ultr_jax.expected_metrics": "expected_metrics"},
  package_data={"ultr_jax.expected_metrics": ["*.json"]},
  python_requires=">=3.10",
  install_requires=[
    "jax>=0.4.35",
    "flax>=0.10",
    "optax>=0.2.5",
    "chex>=0.1.87",
    "orbax-checkpoint>=0.9",
    "absl-py>=2.0",
    "rax>=0.4",
    "ml_collections>=0.1.1",
    "numpy>=1.26",
    "matplotlib>=3.7",
    "scipy>=1.11",
  ],
  extras_require={
    # Baidu-ULTR's Arrow/Parquet files (ultr_jax.data.load_baidu_ultr).
    "baidu": ["pyarrow>=14"],
    # Parquet session shards and the session stream (ultr_jax.data.convert_click_log, SessionStream).
    "stream": ["pyarrow>=14", "grain>=0.2.13"],
    "test": [
      "pyarrow>=14",
      "grain>=0.2.13",
      "pytest>=7",
      "pytest-xdist>=3",
      "ruff>=0.6",
      "scikit-learn>=1.3",
      "nbclient>=0.10",
      "nbformat>=5.9",
      "ipykernel>=6",
    ],
    # The documentation site: sphinx-build -W --keep-going -b html docs docs/_build/html
    "docs": [
      "sphinx>=7.2",
      "furo>=2024.1",
      "myst-nb>=1.1",
      # Math rendered at build time by KaTeX (bundled in the package, run by node), so pages need no CDN.
      "sphinxcontrib-katex>=0.9.9",
    ],
  },
  license="Apache-2.0",
)
