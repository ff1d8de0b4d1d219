"""The three examples end to end: output read back and compared with what the seeded input must give."""

from __future__ import annotations

import json
import time

from spark_examples import batch_job, streaming_job
from spark_examples.events import (
    BASE_TS_MS,
    create_topic,
    expected_window_results,
    generate,
    offsets_by_partition,
    produce,
)
from tests.spark.conftest import read_all, results_by_key, unique_topic

PARTITIONS = 3


def expected_totals(events) -> dict[str, dict]:
    results: dict[str, dict] = {}
    for event in events:
        key = f"{event.source}|{event.kind}"
        row = results.setdefault(
            key,
            {
                "source": event.source,
                "kind": event.kind,
                "events": 0,
                "amount": 0,
                "first_event_id": event.event_id,
                "last_event_id": event.event_id,
            },
        )
        row["events"] += 1
        row["amount"] += event.amount
        row["first_event_id"] = min(row["first_event_id"], event.event_id)
        row["last_event_id"] = max(row["last_event_id"], event.event_id)
    return results


def wait_for_progress(query, batches: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        if sum(1 for p in query.recentProgress if p["numInputRows"] > 0) >= batches:
            return
        query.awaitTermination(0.2)
    raise AssertionError(f"fewer than {batches} non-empty batches after {timeout_s}s")


def wait_until_consumed(query, rows: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        if sum(p["numInputRows"] for p in query.recentProgress) >= rows:
            return
        query.awaitTermination(0.2)
    raise AssertionError(f"query consumed fewer than {rows} rows after {timeout_s}s")


def test_streaming_windows_survive_stop_and_restart(spark, bootstrap, tmp_path):
    """Stopped after its first batch and restarted from the checkpoint, the job still writes every window exactly."""
    source, sink = unique_topic("events"), unique_topic("windows")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, 1)
    events = generate(1200, PARTITIONS)
    # The flush event (it moves the watermark past every window) goes in only once all data is consumed:
    # read early from one partition, it would make the other partitions' remaining events late.
    data, flush = events[:-1], events[-1:]
    produce(bootstrap, source, data)
    checkpoint = str(tmp_path / "checkpoint")

    first = streaming_job.start(spark, bootstrap, source, sink, checkpoint, max_offsets_per_trigger=300)
    wait_for_progress(first, 1)
    first.stop()
    consumed_first = sum(p["numInputRows"] for p in first.recentProgress)
    assert 0 < consumed_first < len(data), "the first run must stop mid-way for the restart to mean anything"

    second = streaming_job.start(spark, bootstrap, source, sink, checkpoint, max_offsets_per_trigger=300)
    try:
        wait_until_consumed(second, len(data) - consumed_first)
        produce(bootstrap, source, flush)
        expected = expected_window_results(events)
        got = results_by_key(read_all(bootstrap, sink, 1, len(expected), timeout_s=180))
        assert got == expected
        consumed_second = sum(p["numInputRows"] for p in second.recentProgress)
        assert consumed_first + consumed_second == len(events), "the restart re-read or skipped input"
    finally:
        second.stop()


def test_batch_with_offset_json(spark, bootstrap):
    source, sink = unique_topic("events"), unique_topic("totals")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, 1)
    events = generate(900, PARTITIONS)
    produce(bootstrap, source, events)
    by_partition = offsets_by_partition(events)
    # Partition 0 from offset 10 to 200, partition 1 all (earliest..latest), partition 2 from 5 to 250.
    starting = json.dumps({source: {"0": 10, "1": -2, "2": 5}})
    ending = json.dumps({source: {"0": 200, "1": -1, "2": 250}})
    records = batch_job.read_slice(spark, bootstrap, source, starting, ending)
    batch_job.write(batch_job.totals(records), bootstrap, sink)

    chosen = by_partition[0][10:200] + by_partition[1] + by_partition[2][5:250]
    expected = expected_totals(chosen)
    assert results_by_key(read_all(bootstrap, sink, 1, len(expected))) == expected


def test_batch_with_starting_offsets_by_timestamp(spark, bootstrap):
    source, sink = unique_topic("events"), unique_topic("totals")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, 1)
    events = generate(900, PARTITIONS)
    produce(bootstrap, source, events)
    since = {0: BASE_TS_MS + 4 * 60_000, 1: BASE_TS_MS + 7 * 60_000, 2: BASE_TS_MS + 1}
    by_timestamp = json.dumps({source: {str(p): ts for p, ts in since.items()}})
    records = batch_job.read_slice(spark, bootstrap, source, starting_offsets_by_timestamp=by_timestamp)
    batch_job.write(batch_job.totals(records), bootstrap, sink)

    chosen = [e for e in events if e.ts >= since[e.partition]]
    expected = expected_totals(chosen)
    assert results_by_key(read_all(bootstrap, sink, 1, len(expected))) == expected
