"""bench.cluster_scaling, run small so it cannot rot: two pybroker brokers with ZooKeeper take a load of
two producer processes and the measurement adds up (the figures themselves are the benchmark's)."""

from __future__ import annotations

import pytest

from bench.cluster_scaling import run_one

pytestmark = pytest.mark.timeout(240)


def test_two_brokers_take_the_load_and_are_measured() -> None:
    # 50 MiB: the brokers' CPU time is read from /proc in clock ticks (10 ms), and 10 MiB cost them about
    # 6 ms in all, so a CI run measured 0 CPU-s/GB at that size.
    result = run_one("pybroker-2", gib=0.05, partitions=4, producers=2, warmup_gib=0)
    assert result["mb_s"] > 0 and result["cpu_s_per_gb"] > 0, result
