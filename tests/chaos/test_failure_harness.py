"""The short CI version of the failure harness (issue 11), against a 3-broker pybroker cluster.

One run plays every kind of fault (two leader SIGKILLs, two clean bounces, two controller kills, a leader
frozen past its ZooKeeper session, a leader cut off from the others and from ZooKeeper) under acks=all
idempotent writers from confluent-kafka and aiokafka: nothing acknowledged may be lost, duplicated or
reordered, the replicas' logs must be identical at the end, a write sent straight to a deposed leader
must not be acknowledged, and every controller election must raise /controller_epoch. Then the two
negative controls must find the loss Kafka would suffer too (acks=1 with a leader kill; an unclean
election of a stale replica), proving the checker sees loss.

Sessions are 4 s (ZooKeeper's minimum at its 2 s tick) so a fault costs seconds; the stall bounds are
wider than the explicit run's (session + 5 s, bounce 3 s) so a loaded machine does not fail them. The
full runs are explicit commands: docs/CLUSTER_TESTING.md.  CHAOS_CLUSTER=kafka runs the same against a
3-node Apache Kafka cluster.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.chaos.__main__ import make_cluster
from tools.chaos.controls import acks1_control, unclean_control
from tools.chaos.harness import Options, human_summary, run

CLUSTER = os.environ.get("CHAOS_CLUSTER", "pybroker")
SETTINGS = {"pybroker": {"zookeeper.session.timeout.ms": "4000"}, "kafka": {}}[CLUSTER]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    launcher = make_cluster(CLUSTER, Path(tmp_path_factory.mktemp("chaos")), 3, SETTINGS)
    launcher.start()
    try:
        yield launcher
    finally:
        launcher.stop()


def test_acks_all_survives_every_kind_of_fault(cluster: Any) -> None:
    options = Options(
        topic="chaos-ci", duration=15, kills=2, bounces=2, controller_kills=2, freeze=1, partition_cut=1,
        cut_s=8, down_s=1, rate=100, warmup_s=3, cooldown_s=4, deadline_s=240, recover_timeout_s=60,
        stall_margin_s=15, bounce_stall_limit_s=10,
    )  # fmt: skip
    summary = run(cluster, options)
    print(human_summary(summary))
    check = summary["check"]
    assert summary["faults_done"] == {"kill": 2, "bounce": 2, "controller-kill": 2, "freeze": 1, "cut": 1}, summary
    assert check["acknowledged"] > 1000, check
    assert (check["lost"], check["duplicated"], check["reordered"]) == (0, 0, 0), check
    assert check["offset_mismatch"] == 0 and check["wrong_partition"] == 0, check
    assert not summary["writer_errors"], summary["writer_errors"]
    assert summary["replicas"]["agree"], summary["replicas"]
    assert summary["controller_epochs_strictly_increasing"], summary["controller_epochs"]
    for event in summary["events"]:
        assert event["recovered_s"] is not None, event
        assert event["stall_ok"], event  # kills within session + 15 s, bounces within 10 s
        if event["kind"] in ("freeze", "cut") and event["partitions"]:
            deposed = event["deposed"]
            assert deposed["new_leaders_elected"], event
            assert deposed["probe"] and not deposed["probe_acknowledged"], event  # the probe was sent, not acked
            assert deposed["lost"] == 0 and deposed["offset_mismatch"] == 0, event
    assert summary["safety_ok"] and summary["ok"], human_summary(summary)


def test_acks1_control_detects_loss(cluster: Any) -> None:
    options = Options(topic="chaos-ci", writers=("confluent",), rate=2000, warmup_s=2, down_s=1)
    summary = acks1_control(cluster, options, max_kills=6, max_s=100)
    print(summary)
    assert summary["loss_detected"], summary
    assert summary["replicas_agree_after"], summary  # the old leader truncated what it alone had


def test_unclean_election_control_detects_loss(cluster: Any) -> None:
    summary = unclean_control(cluster, Options(topic="chaos-ci"), records=100)
    print(summary)
    assert summary["stale_replica_elected"], summary
    assert summary["loss_detected"] and summary["check"]["lost"] > 0, summary
    assert summary["replicas_agree_after"], summary  # the fresh replica truncated to the stale leader's log
