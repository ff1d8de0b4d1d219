"""KIP-534: the log cleaner removes transaction markers (and tombstones) past their delete horizon.

Kafka's two passes: a clean that finds a marker whose transaction has no batch left in the log (a
"discardable" marker) stamps the batch's delete horizon (``now + delete.retention.ms``, in the base
timestamp with the ``deleteHorizonMs`` attribute bit); a clean at or past the horizon removes it.
The clock is the ``now_ms`` each pass is given.  The last batch of every active producer is kept
(emptied if need be), so a producer state rebuilt from the log still has its sequence and epoch;
while it stands, the marker of its transaction stays too.
"""

from __future__ import annotations

from pathlib import Path

from conftest import append

from pybroker.records import SimpleRecord, build_batch, iter_batch_headers, read_records
from pybroker.records.batch import DELETE_HORIZON_MASK
from pybroker.records.control import ABORT, COMMIT, control_type
from pybroker.storage import Log, LogConfig
from pybroker.storage.cleaner import clean_log

T0 = 1_000_000_000_000
RETENTION = 60_000
COMPACT = LogConfig(cleanup_policy="compact")


class Txns:
    """Writes one-record transactional batches and markers, as producers and a coordinator do."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.sequences: dict[int, int] = {}
        self.epochs: dict[int, int] = {}

    def send(self, pid: int, key: bytes, value: bytes | None) -> int:
        seq = self.sequences.get(pid, 0)
        batch = build_batch(
            [SimpleRecord(key, value, timestamp_ms=T0 - 1000)],
            producer_id=pid,
            producer_epoch=self.epochs.get(pid, 0),
            base_sequence=seq,
            is_transactional=True,
        )
        self.sequences[pid] = seq + 1
        return append(self.log, bytearray(batch), now_ms=T0 - 1000).first_offset

    def end(self, pid: int, commit: bool, bump: bool = False) -> int:
        """A marker; ``bump``: transaction version 2, whose marker carries the bumped epoch."""
        epoch = self.epochs.get(pid, 0) + (1 if bump else 0)
        info = self.log.append_marker(
            pid, epoch, commit, 0, leader_epoch=0, now_ms=T0 - 1000, transaction_version=2 if bump else 0
        )
        if bump:
            self.epochs[pid] = epoch
            self.sequences[pid] = 0
        return info.first_offset

    def plain(self, key: bytes, value: bytes) -> int:
        batch = build_batch([SimpleRecord(key, value, timestamp_ms=T0 - 1000)])
        return append(self.log, bytearray(batch), now_ms=T0 - 1000).first_offset


def batches(log: Log) -> list[tuple[int, str, int, bool]]:
    """(base offset, kind, records, delete horizon stamped) of every batch, in order."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read()
        headers = list(iter_batch_headers(data))
        for h in headers:
            chunk = data[h.position : h.end_position]
            if h.is_control:
                kind = {COMMIT: "COMMIT", ABORT: "ABORT"}.get(control_type(chunk), "control")  # type: ignore[arg-type]
            else:
                kind = "data"
            out.append((h.base_offset, kind, h.records_count, bool(h.attributes & DELETE_HORIZON_MASK)))
        offset = headers[-1].next_offset
    return out


def records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """The data records (what a consumer gets), markers left out."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read()
        control = {h.base_offset for h in iter_batch_headers(data) if h.is_control}
        out += [(r.offset, r.key, r.value) for r in read_records(data) if r.offset not in control]
        offset = list(iter_batch_headers(data))[-1].next_offset
    return out


def write_transactions(log: Log) -> Txns:
    """pid 1 commits a=a1, b=b1; pid 2 aborts c; pid 1 commits a=a2 and deletes b; then plain records
    (the last, x@9, in the active segment)."""
    t = Txns(log)
    assert [t.send(1, b"a", b"a1"), t.send(1, b"b", b"b1"), t.end(1, True)] == [0, 1, 2]
    assert [t.send(2, b"c", b"aborted"), t.end(2, False)] == [3, 4]
    assert [t.send(1, b"a", b"a2"), t.send(1, b"b", None), t.end(1, True)] == [5, 6, 7]
    assert t.plain(b"x", b"1") == 8
    log.roll(T0)
    assert t.plain(b"x", b"2") == 9
    return t


def test_markers_go_in_two_passes_once_their_transaction_has_no_batch_left(tmp_path: Path) -> None:
    log = Log.create(tmp_path / "t-0", "t", 0, COMPACT, 0)
    write_transactions(log)
    assert [e.last_offset for e in log.segments[0].txn_index.entries] == [4]
    # The producers expired (Kafka's producer.id.expiration.ms): nothing keeps their last batches.
    assert log.remove_expired_producers(T0 + 10**9, 1) == 2

    # Pass 1: the superseded and the aborted records go; every marker's transaction still had a
    # batch in this pass, so the markers stay unstamped; the tombstone is stamped.
    clean_log(log, T0, RETENTION)
    assert batches(log) == [
        (2, "COMMIT", 1, False),
        (4, "ABORT", 1, False),
        (5, "data", 1, False),
        (6, "data", 1, True),
        (7, "COMMIT", 1, False),
        (8, "data", 1, False),
        (9, "data", 1, False),
    ]
    assert [e.last_offset for e in log.segments[0].txn_index.entries] == [4]  # data seen this pass
    tombstone = next(h for h in iter_batch_headers(log.read(6, 1 << 20).read()) if h.base_offset == 6)
    assert tombstone.base_timestamp == T0 + RETENTION  # the horizon, in the base timestamp
    assert read_records(log.read(6, 1 << 20).read())[0].timestamp == T0 - 1000  # record kept its own

    # Pass 2: the first two markers have no batch left: stamped with T1 + delete.retention.ms; the
    # ABORT's transaction index entry goes (nothing of it is left to skip for read_committed).
    t1 = T0 + 1000
    clean_log(log, t1, RETENTION)
    assert batches(log)[:2] == [(2, "COMMIT", 1, True), (4, "ABORT", 1, True)]
    assert log.segments[0].txn_index.entries == []
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []

    # Past the tombstone's horizon but before the markers': only the tombstone goes.
    clean_log(log, T0 + RETENTION, RETENTION)
    assert [b[0] for b in batches(log)] == [2, 4, 5, 7, 8, 9]
    # Just before the markers' horizon they are still there; at it they go.  The last COMMIT
    # stays: its transaction still has a record (a2).
    clean_log(log, t1 + RETENTION - 1, RETENTION)
    assert [b[0] for b in batches(log)] == [2, 4, 5, 7, 8, 9]
    clean_log(log, t1 + RETENTION, RETENTION)
    assert batches(log) == [
        (5, "data", 1, False),
        (7, "COMMIT", 1, False),
        (8, "data", 1, False),
        (9, "data", 1, False),
    ]
    assert records(log) == [(5, b"a", b"a2"), (8, b"x", b"1"), (9, b"x", b"2")]
    # The cleaned log (and its transaction index) survives a restart as it is.
    log.close()
    reopened = Log.open(tmp_path / "t-0", "t", 0, COMPACT, T0, clean_shutdown=True)
    assert [b[0] for b in batches(reopened)] == [5, 7, 8, 9]
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == []


def test_an_active_producers_last_batch_and_its_marker_stay(tmp_path: Path) -> None:
    """Kafka's isBatchLastRecordOfProducer: the batch holding an active producer's last data offset
    is kept, emptied of its removed records, so its sequence survives a rebuild; its transaction's
    marker then stays too.  A transaction version 2 producer's current epoch has no data (the marker
    bumped it): its last marker is kept, emptied once past its horizon, for the epoch."""
    log = Log.create(tmp_path / "t-0", "t", 0, COMPACT, 0)
    t = write_transactions(log)
    log.roll(T0)
    assert [t.send(3, b"d", b"d1"), t.end(3, True, bump=True)] == [10, 11]
    assert [t.send(3, b"d", b"d2"), t.end(3, True, bump=True)] == [12, 13]
    assert t.plain(b"d", b"d3") == 14  # supersedes pid 3's records
    log.roll(T0)
    t.plain(b"x", b"3")  # 15, active

    for now in (T0, T0 + 1000, T0 + 3 * RETENTION, T0 + 5 * RETENTION):
        clean_log(log, now, RETENTION)
    assert batches(log) == [
        (3, "data", 0, False),  # pid 2's aborted batch: its records gone, the batch kept for pid 2
        (4, "ABORT", 1, False),  # ... so its transaction is still seen: the marker stays
        (5, "data", 1, False),
        (6, "data", 0, False),  # pid 1's last batch: the tombstone gone, the batch kept
        (7, "COMMIT", 1, False),
        (9, "data", 1, False),  # x@8 superseded once x@9 left the active segment
        (13, "control", 0, False),  # pid 3's last marker: kept for its epoch, emptied past its horizon
        (14, "data", 1, False),
        (15, "data", 1, False),
    ]
    assert [e.last_offset for e in log.segments[0].txn_index.entries] == [4]

    # A producer state rebuilt from the cleaned log alone still knows every producer.
    expected = {
        pid: (e.epoch, e.last_sequence, e.current_txn_first_offset)
        for pid, e in log.producer_state.producers.items()
    }
    assert expected == {1: (0, 3, -1), 2: (0, 0, -1), 3: (2, -1, -1)}
    log.close()
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()
    reopened = Log.open(tmp_path / "t-0", "t", 0, COMPACT, T0)
    rebuilt = {
        pid: (e.epoch, e.last_sequence, e.current_txn_first_offset)
        for pid, e in reopened.producer_state.producers.items()
    }
    # pid 3's last marker was emptied: the producer stays known, its epoch does not (Kafka's
    # rebuild applies no marker from an empty control batch either).
    assert rebuilt == {**expected, 3: (-1, -1, -1)}
    assert reopened.first_unstable_offset() is None
