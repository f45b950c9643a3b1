"""Every study's default config and its variants, shipped with the package.

One module per study (``configs/<study>.py``), each with ``VARIANTS`` (``"default"`` first, ``"smoke"``
the seconds-long one the tests run), ``default_config(variant="default")`` and ``CONFIG_RULES`` (the
allowed values of the fields the study reads, checked by :func:`ultr_jax.studies.validate_config` before
any work). The study modules re-export the three names; ``ultr_jax.studies.default_config(name, variant)``
is the entry point, and the binaries' ``experiments/<study>/configs/default.py`` return it.
"""
