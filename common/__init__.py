"""Helpers every package may import: this package imports no other package of the repo (the bottom layer of the
package order that ``tests/test_architecture.py`` enforces)."""
