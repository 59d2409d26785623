"""Kernel checks: a recipe's ``check.py`` run against plain torch on a GPU (``harness`` is the half that runs in the environment under test)."""
