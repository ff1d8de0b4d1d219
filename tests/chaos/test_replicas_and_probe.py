"""The harness's two direct checks, each shown able to fail: the on-disk replica comparison (hand-made
segment files, no broker) and the deposed-leader probe (against a real single pybroker that *is* the
leader, so an acknowledgement is what it must report)."""

from __future__ import annotations

from pathlib import Path

from compat_tests.brokers import PyBroker
from pybroker.records.builder import SimpleRecord, build_batch
from tools.chaos.checker import LogRecord, acks_in_window
from tools.chaos.probe import DeposedLeaderProbe
from tools.chaos.replicas import compare_replicas, read_fingerprints
from tools.chaos.workload import WriterLog, encode


class Dirs:
    def __init__(self, root: Path, nodes: list[int]) -> None:
        self.root = root
        self.nodes = nodes

    def node_ids(self) -> list[int]:
        return self.nodes

    def data_dir(self, node_id: int) -> Path:
        return self.root / f"node{node_id}"


def write_log(path: Path, values: list[bytes], base: int = 0, tail: bytes = b"") -> None:
    path.mkdir(parents=True, exist_ok=True)
    data = b"".join(
        build_batch([SimpleRecord(None, v, timestamp_ms=1000 + i)], base_offset=base + i) for i, v in enumerate(values)
    )
    (path / f"{base:020d}.log").write_bytes(data + tail)


def test_identical_replicas_agree_and_a_divergent_one_is_found(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path, [1, 2, 3])
    common = [b"a", b"b", b"c"]
    write_log(dirs.data_dir(1) / "t-0", [*common, b"d"])
    write_log(dirs.data_dir(2) / "t-0", [*common, b"d"], tail=b"\0" * 64)  # a zero tail ends the read
    write_log(dirs.data_dir(3) / "t-0", [*common, b"X"])  # a deposed leader that kept its own offset 3
    for node in (1, 2, 3):
        write_log(dirs.data_dir(node) / "t-1", common)
    assert len(read_fingerprints(dirs.data_dir(2) / "t-0")) == 4
    result = compare_replicas(dirs, "t", 2)
    assert result["divergent"] == [0]
    assert result["partitions"]["0"]["differences"] == {"3": {"first_difference_at_offset": 3, "vs_node": 1}}
    assert "differences" not in result["partitions"]["1"]


def test_a_replica_missing_the_tail_is_divergent(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path, [1, 2])
    write_log(dirs.data_dir(1) / "t-0", [b"a", b"b"])
    write_log(dirs.data_dir(2) / "t-0", [b"a"])
    result = compare_replicas(dirs, "t", 1)
    assert result["divergent"] == [0]
    assert result["partitions"]["0"]["end_offset"] == {"1": 2, "2": 1}


def test_acks_in_a_window_are_checked_against_the_log() -> None:
    log = WriterLog("w0.0")
    log.sent.update({(0, 0): 1.0, (0, 1): 5.0, (0, 2): 6.0, (1, 0): 5.5})
    log.acked.update({(0, 0): (1.5, 0), (0, 1): (5.5, 1), (0, 2): (6.5, 2), (1, 0): (6.0, 0)})
    records = [LogRecord(0, 0, "w0.0", 0, 0), LogRecord(0, 2, "w0.0", 0, 1)]  # seq 1 moved, seq 2 gone
    assert acks_in_window([log], records, {0}, 5.0, 7.0) == {"acknowledged": 2, "lost": 1, "offset_mismatch": 1}
    assert acks_in_window([log], records, {0}, 0.0, 2.0) == {"acknowledged": 1, "lost": 0, "offset_mismatch": 0}


def test_probe_reports_an_acknowledgement_from_a_real_leader(tmp_path: Path) -> None:
    """The probe against a broker that does lead its partitions: acks=all is satisfied at once (one
    replica), so the probe must say so, and record the write as acknowledged at its offset."""
    from confluent_kafka.admin import AdminClient, NewTopic

    with PyBroker(tmp_path / "broker") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("probe-topic", num_partitions=2)])["probe-topic"].result(30)
        probe = DeposedLeaderProbe(1, broker.port, "probe-topic", [0, 1])
        probe.connect()
        probe.send()
        answers = probe.result(30)
        assert answers == {0: "NONE", 1: "NONE"}, answers
        assert probe.acknowledged == [0, 1]
        assert probe.log.acked[(0, 0)][1] >= 0 and not probe.log.failed
        assert encode("probe1.0", 0, 0) == encode(probe.log.name, 0, 0)
