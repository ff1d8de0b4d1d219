"""CI smoke run of bench.loader_cost at a toy size against pybroker: it must run to the end and print
the loader's CPU and librdkafka's view of the requests.  Only the shape and the counts are checked —
never a time or a rate."""

from __future__ import annotations

import pytest

from tests.bench.bench_process import run_bench


@pytest.mark.timeout(200)
def test_loader_cost_runs_at_a_toy_size() -> None:
    result = run_bench(
        "bench.loader_cost", "--systems", "pybroker", "--runs", "1", "--mib", "16", "--warmup-mib", "1",
        "--no-fill-page-cache",  # the compare smoke run fills it
        timeout_s=180,
    )  # fmt: skip
    header = next(line for line in result.stdout.splitlines() if line.startswith("| system |"))
    names = [cell.strip() for cell in header.strip("|").split("|")]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| pybroker |")]
    assert len(rows) == 1, result.stdout
    cells = dict(zip(names, (cell.strip() for cell in rows[0].strip("|").split("|")), strict=True))
    # 16 MiB of 1 KiB records went out in Produce requests librdkafka counted, in batches of records.
    assert int(cells["Produce requests"].replace(",", "")) >= 1
    assert 0 < float(cells["KB per request"].replace(",", "")) <= 1100
    assert float(cells["records per batch"].replace(",", "")) >= 1
    assert float(cells["Python thread s"]) > 0  # the loader's own thread was measured


@pytest.mark.timeout(200)
def test_java_loader_cost_runs_at_a_toy_size() -> None:
    """The Java loader's variant: ProducerPerformance's own metrics are parsed into the table."""
    result = run_bench(
        "bench.loader_cost", "--loader", "java", "--partitions", "8", "--systems", "pybroker",
        "--runs", "1", "--mib", "16", "--warmup-mib", "1", "--no-fill-page-cache",
        timeout_s=180,
    )  # fmt: skip
    header = next(line for line in result.stdout.splitlines() if line.startswith("| system |"))
    names = [cell.strip() for cell in header.strip("|").split("|")]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| pybroker |")]
    assert len(rows) == 1, result.stdout
    cells = dict(zip(names, (cell.strip() for cell in rows[0].strip("|").split("|")), strict=True))
    requests = int(cells["Produce requests"].replace(",", ""))
    # 16 MiB went out in requests of at most the producer's 1 MiB max.request.size, batches of <= 16 KiB.
    assert requests >= 16
    assert 0 < float(cells["KB per request"].replace(",", "")) <= 1100
    assert 0 < float(cells["batch KB"]) <= 16.5
    assert float(cells["records per request"]) >= 1
    assert float(cells["loader CPU-s/GB"]) > 0  # the JVM's CPU time was read


def test_java_metrics_parse() -> None:
    from bench.loader_cost import parse_java_metrics

    output = (
        "producer-metrics:batch-size-avg:{client-id=perf-producer-client}                : 15706.264\n"
        "producer-metrics:request-total:{client-id=perf-producer-client}                 : 8192.000\n"
        "producer-topic-metrics:record-send-total:{client-id=perf-producer-client, topic=t} : 5.000\n"
    )
    assert parse_java_metrics(output) == {"batch-size-avg": 15706.264, "request-total": 8192.0}
