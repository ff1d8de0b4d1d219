"""bench.cluster_scaling, run small so it cannot rot: two pybroker brokers with ZooKeeper take a load of
two producer processes and the measurement adds up (the figures themselves are the benchmark's)."""

from __future__ import annotations

import pytest

from bench.cluster_scaling import run_one

pytestmark = pytest.mark.timeout(240)


def test_two_brokers_take_the_load_and_are_measured() -> None:
    result = run_one("pybroker-2", gib=0.01, partitions=4, producers=2, warmup_gib=0)
    assert result["mb_s"] > 0 and result["cpu_s_per_gb"] > 0, result
