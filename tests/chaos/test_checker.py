"""The checker's arithmetic on hand-made histories (no broker): each anomaly is seen and counted once."""

from __future__ import annotations

from tools.chaos.checker import LogRecord, check, produce_stall
from tools.chaos.workload import WriterLog, decode, encode


def history(acks: dict[tuple[int, int], tuple[float, int]], sent_at: float = 0.0) -> WriterLog:
    log = WriterLog("w0.0")
    for key, ack in acks.items():
        log.sent[key] = sent_at
        log.acked[key] = ack
    return log


def test_value_round_trip() -> None:
    assert decode(encode("confluent0.1", 7, 12345)) == ("confluent0.1", 7, 12345)


def test_clean_history_is_ok() -> None:
    log = history({(0, 0): (1.0, 0), (0, 1): (1.1, 1), (1, 0): (1.2, 0)})
    records = [LogRecord(0, 0, "w0.0", 0, 0), LogRecord(0, 1, "w0.0", 0, 1), LogRecord(1, 0, "w0.0", 1, 0)]
    result = check([log], records)
    assert result.ok() and result.acknowledged == 3 and result.lost == 0


def test_each_anomaly_is_counted() -> None:
    log = history({(0, 0): (1.0, 0), (0, 1): (1.1, 1), (0, 2): (1.2, 2), (0, 3): (1.3, 3), (1, 0): (1.4, 0)})
    log.sent[(0, 4)] = 1.5  # never acknowledged, but written: allowed
    records = [
        LogRecord(0, 0, "w0.0", 0, 0),
        LogRecord(0, 1, "w0.0", 0, 2),  # seq 2 before seq 1: reordered (seq 1 is the late one)
        LogRecord(0, 2, "w0.0", 0, 1),
        LogRecord(0, 3, "w0.0", 0, 2),  # seq 2 again: duplicated
        LogRecord(0, 4, "w0.0", 0, 4),
        # seq 3 missing: lost; partition 1's record written elsewhere and at another offset
        LogRecord(2, 5, "w0.0", 1, 0),
    ]
    result = check([log], records)
    assert (result.lost, result.duplicated, result.reordered) == (1, 1, 1)
    assert result.wrong_partition == 1 and result.unacknowledged_present == 1
    # seq 1 acked at 1 found at 2, seq 2 acked at 2 found at 1 and 3, (1, 0) acked at 0 found at 5
    assert result.offset_mismatch == 3
    assert result.lost_examples == ["w0.0 p0 seq 3 acked at offset 3"]
    assert not result.ok()


def test_window_judges_only_its_acks() -> None:
    log = history({(0, 0): (1.0, 0), (0, 1): (5.0, 1), (0, 2): (9.0, 2)})
    records = [LogRecord(0, 0, "w0.0", 0, 0)]  # a read from the start that only saw offset 0
    assert check([log], records, acked_before=4.0).lost == 0
    assert check([log], records, acked_before=6.0, acked_after=4.0).lost == 1


def test_stall_is_first_ack_of_a_write_sent_after_the_fault() -> None:
    log = WriterLog("w0.0")
    log.sent.update({(0, 0): 9.0, (0, 1): 10.5, (1, 0): 10.2})
    log.acked.update({(0, 0): (12.0, 0), (0, 1): (14.0, 1), (1, 0): (11.0, 0)})
    assert produce_stall([log], 10.0, {0}) == 4.0  # (0, 0) was sent before the fault: not counted
    assert produce_stall([log], 10.0, {0, 1}) == 4.0
    assert produce_stall([log], 10.0, None) == 1.0
    assert produce_stall([log], 10.0, {2}) is None
