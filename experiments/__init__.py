"""Entry points (``python -m experiments.<name>``): training, sweeps, studies, the demo, reports, benchmarks."""
import trainer  # noqa: F401  (its import sets OMP_WAIT_POLICY before any entry point loads torch: trainer/threads.py)
