"""trainer.threads: the free-core count and the warning a multi-thread build gives when it cannot have its cores."""
from __future__ import annotations

import os

from trainer.threads import contention_warning, free_cores


def test_free_cores_is_between_one_and_the_cores_this_process_may_use():
    n = free_cores(sample_s=0.05)
    assert 1 <= n <= len(os.sched_getaffinity(0))


def test_contention_warning_names_the_threads_and_the_free_cores():
    assert contention_warning(1, free=0, cores=2) is None  # one thread has no workers to stall
    assert contention_warning(2, free=2, cores=2) is None
    assert contention_warning(2, free=4, cores=8) is None
    busy = contention_warning(2, free=1, cores=2)
    assert busy is not None and "2 torch threads" in busy and "only 1 of 2 core(s) are free" in busy
    assert "threads.md" in busy
    small = contention_warning(4, free=2, cores=2)
    assert small is not None and "machine with 2 core(s)" in small
