"""The short CI version of the failure harness (issue 11), against a 3-node Apache Kafka cluster.

Two leader SIGKILLs under acks=all idempotent writers from confluent-kafka and aiokafka must lose,
duplicate and reorder nothing; the acks=1 negative control must find loss (proving the checker sees
it).  The long runs are explicit commands: docs/CLUSTER_TESTING.md.  Once pybroker has cluster mode,
the same tests take CHAOS_CLUSTER=pybroker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.chaos.__main__ import make_cluster
from tools.chaos.controls import acks1_control
from tools.chaos.harness import Options, human_summary, run

CLUSTER = os.environ.get("CHAOS_CLUSTER", "kafka")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    launcher = make_cluster(CLUSTER, Path(tmp_path_factory.mktemp("chaos")), 3, {})
    launcher.start()
    try:
        yield launcher
    finally:
        launcher.stop()


def test_acks_all_survives_leader_kills(cluster: Any) -> None:
    options = Options(
        topic="chaos-ci", duration=25, kills=2, bounces=0, controller_kills=0, freeze=0, partition_cut=0,
        rate=150, warmup_s=3, cooldown_s=5,
    )  # fmt: skip
    summary = run(cluster, options)
    print(human_summary(summary))
    check = summary["check"]
    assert summary["faults_done"]["kill"] == 2, summary["events"]
    assert check["acknowledged"] > 1000, check
    assert (check["lost"], check["duplicated"], check["reordered"]) == (0, 0, 0), check
    assert check["offset_mismatch"] == 0 and check["wrong_partition"] == 0, check
    assert not summary["writer_errors"], summary["writer_errors"]
    for event in summary["events"]:  # writes resumed after every kill, on the partitions it led
        assert event["stall_any_s"] is not None, event


def test_acks1_control_detects_loss(cluster: Any) -> None:
    options = Options(topic="chaos-ci", writers=("confluent",), rate=2000, warmup_s=2, down_s=1)
    summary = acks1_control(cluster, options, max_kills=6, max_s=150)
    print(summary)
    assert summary["loss_detected"], summary
