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
  python_requires=">=3.11",
  # Lower bounds: the versions CI runs (the suite has run on nothing older); orbax-checkpoint stays below 1.0,
  # whose API changes, until the move is made on purpose.
  install_requires=[
    "jax>=0.10.2",
    "flax>=0.12.8",
    "optax>=0.2.8",
    "orbax-checkpoint>=0.12.8,<1.0",
    "absl-py>=2.5",
    "rax>=0.4",
    "ml_collections>=1.1",
    "numpy>=2.4",
    "matplotlib>=3.11",
    "scipy>=1.17",
  ],
  extras_require={
    # Baidu-ULTR's Arrow/Parquet files (ultr_jax.data.load_baidu_ultr).
    "baidu": ["pyarrow>=26"],
    # Parquet session shards and the session stream (ultr_jax.data.convert_click_log, SessionStream).
    "stream": ["pyarrow>=26", "grain>=0.2.18"],
    "test": [
      "pyarrow>=26",
      "grain>=0.2.18",
      # Only the tests import chex; the library does not.
      "chex>=0.1.92",
      "pytest>=9",
      "pytest-xdist>=3.8",
      "ruff>=0.17",
      "pyright>=1.1.414",
      "scikit-learn>=1.9",
      "nbclient>=0.11",
      "nbformat>=5.11",
      "ipykernel>=7",
    ],
    # The documentation site: sphinx-build -W --keep-going -b html docs docs/_build/html
    "docs": [
      "sphinx>=9",
      "furo>=2025.12",
      "myst-nb>=1.4",
      # Math rendered at build time by KaTeX (bundled in the package, run by node), so pages need no CDN.
      "sphinxcontrib-katex>=0.9.11",
    ],
  },
  license="Apache-2.0",
)
