"""bench.sysstat's CPU readings, against this machine's /proc."""

from __future__ import annotations

import math
import os
import threading
import time

from bench.sysstat import busy_share, cpu_idle_seconds


def test_busy_share_is_wall_time_less_idle_time_over_the_cpus() -> None:
    assert busy_share({1}, idle_s=0.25, elapsed_s=1.0) == 0.75
    assert busy_share({0, 1}, idle_s=0.5, elapsed_s=1.0) == 0.75  # two CPUs: 2 s of CPU time
    assert busy_share({1}, idle_s=2.0, elapsed_s=1.0) == 0.0  # /proc's 10 ms units: clamped
    assert busy_share({1}, idle_s=-0.01, elapsed_s=1.0) == 1.0
    assert math.isnan(busy_share(set(), idle_s=0.0, elapsed_s=1.0))  # not pinned: nothing to say
    assert math.isnan(busy_share({1}, idle_s=0.0, elapsed_s=0.0))


def test_a_cpu_kept_spinning_reads_busy() -> None:
    cpu = min(os.sched_getaffinity(0))
    done = threading.Event()

    def spin() -> None:
        os.sched_setaffinity(0, {cpu})  # this thread only
        while not done.is_set():
            pass

    idle_before, started = cpu_idle_seconds({cpu}), time.perf_counter()
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        time.sleep(1.0)
    finally:
        done.set()
        spinner.join()
    share = busy_share({cpu}, cpu_idle_seconds({cpu}) - idle_before, time.perf_counter() - started)
    # The spinning thread shares the GIL with this one, which only sleeps: the CPU is never idle.
    assert share >= 0.9, share


def test_cpus_the_machine_does_not_have_have_no_idle_time() -> None:
    assert cpu_idle_seconds({10_000}) == 0.0
