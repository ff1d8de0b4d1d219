"""Parsing the summaries Kafka's load tools print (lines copied from kafka-tools 4.3.1 runs)."""

from __future__ import annotations

import math

import pytest

from bench.kafka_tools import (
    ParseError,
    parse_consumer_performance,
    parse_end_to_end_latency,
    parse_producer_performance,
)

PRODUCER_OUTPUT = """\
69526 records sent, 13902.4 records/sec (13.58 MB/sec), 1475.7 ms avg latency, 2408.0 ms max latency.
200000 records sent, 23454.907939 records/sec (22.91 MB/sec), 1132.68 ms avg latency, 2408.00 ms max latency, \
1064 ms 50th, 2249 ms 95th, 2393 ms 99th, 2406 ms 99.9th.
"""

CONSUMER_OUTPUT = """\
SLF4J: some warning
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, \
fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-22 07:28:14:488, 2026-11-22 07:28:19:426, 195.4775, 39.5864, 200169, 40536.4520, 3330, 1608, \
121.5656, 124483.2090
"""

E2E_OUTPUT = """\
WARNING: Positional argument usage is deprecated
0\t82.704441
1000\t1.047154
Avg latency: 1.5128 ms

Percentiles: 50th = 1, 99th = 8, 99.9th = 21
"""


def test_producer_summary_takes_the_line_with_percentiles() -> None:
    result = parse_producer_performance(PRODUCER_OUTPUT, record_size=1024)
    assert result.records == 200000
    assert result.records_per_s == pytest.approx(23454.907939)
    assert (result.p50_ms, result.p99_ms, result.p999_ms) == (1064, 2393, 2406)
    # MB/s is 10^6 bytes from the record rate, not the tool's MiB figure (22.91).
    assert result.mb_per_s == pytest.approx(23454.907939 * 1024 / 1e6)


def test_producer_latencies_are_the_steady_states_when_the_run_had_a_warm_up() -> None:
    output = (  # kafka-tools 4.3.1, --warmup-records 100000, paced at 50,000 records/s, against pybroker
        "Warmup first 100000 records. Steady state results will print after the complete test summary.\n"
        "300000 records sent, 49883.604922 records/sec (48.71 MB/sec), 62.24 ms avg latency, 429.00 ms max "
        "latency, 1 ms 50th, 403 ms 95th, 416 ms 99th, 424 ms 99.9th.\n"
        "200000 steady state records sent, 49640.109208 records/sec (48.48 MB/sec), 0.75 ms avg latency, "
        "11.00 ms max latency, 1 ms 50th, 3 ms 95th, 4 ms 99th, 7 ms 99.9th.\n"
    )
    result = parse_producer_performance(output, record_size=1024)
    # Count and rate of the whole run (the broker's CPU covers all of it), percentiles of the steady state.
    assert (result.records, result.records_per_s) == (300000, pytest.approx(49883.604922))
    assert (result.p50_ms, result.p99_ms, result.p999_ms) == (1, 4, 7)


def test_consumer_rate_is_the_fetch_rate_without_the_group_join() -> None:
    result = parse_consumer_performance(CONSUMER_OUTPUT, record_size=1024)
    assert result.records == 200169
    assert result.records_per_s == pytest.approx(124483.2090)
    assert math.isnan(result.p99_ms)


def test_end_to_end_percentiles() -> None:
    result = parse_end_to_end_latency(E2E_OUTPUT, records=5000, record_size=1024)
    assert (result.p50_ms, result.p99_ms, result.p999_ms) == (1, 8, 21)
    assert result.records == 5000
    assert math.isnan(result.records_per_s)


@pytest.mark.parametrize(
    "parse",
    [
        lambda text: parse_producer_performance(text, 1024),
        lambda text: parse_consumer_performance(text, 1024),
        lambda text: parse_end_to_end_latency(text, 10, 1024),
    ],
)
def test_output_without_a_summary_is_an_error(parse) -> None:
    with pytest.raises(ParseError):
        parse("Exception in thread main org.apache.kafka.common.errors.TimeoutException\n")


def test_progress_line_alone_is_not_a_summary() -> None:
    with pytest.raises(ParseError):
        parse_producer_performance(PRODUCER_OUTPUT.splitlines()[0], 1024)
