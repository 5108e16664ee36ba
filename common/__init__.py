"""Helpers every package may import: this package imports no other package of the repo but ``estimators``, the bottom
layer (``config_checks`` re-exports its checks) of the package order that ``tests/test_architecture.py`` enforces."""
