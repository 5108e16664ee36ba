"""Entry points (``python -m experiments.<name>``): training, sweeps, studies, the demo, reports, benchmarks."""
from trainer.threads import use_passive_wait

use_passive_wait()  # before any entry point loads torch (trainer/threads.py)
