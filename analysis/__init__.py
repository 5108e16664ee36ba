"""Reading run folders and comparing methods across seeds: statistics, tables and plots.

Used by ``python -m experiments.report``; library code so that tests can check every number.
"""
