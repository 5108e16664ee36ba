"""The study machinery behind the ``experiments`` entry points: the sweep scheduler (``lab.sweep``: run specs,
statuses, N runs at a time with resume) and the study runner (``lab.study``: named studies = warm start + sweep +
report). ``python -m experiments.sweep`` / ``python -m experiments.study`` call their ``main``."""
