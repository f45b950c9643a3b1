"""Helpers of the studies' configs: variants and value rules (:mod:`ultr_jax.studies.configs`)."""

from typing import Sequence

__all__ = ["unknown_variant"]


def unknown_variant(study: str, variant: str, variants: Sequence[str]) -> ValueError:
  """The error for a variant ``study`` does not have, naming the known ones.

  >>> print(unknown_variant("lbd", "large", ("default", "smoke")))
  unknown config variant 'large' of study 'lbd'; expected one of ('default', 'smoke')
  """
  return ValueError(f"unknown config variant {variant!r} of study {study!r}; expected one of {tuple(variants)}")
