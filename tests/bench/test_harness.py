"""The benchmark harness's honesty settings, checked without running a benchmark: Kafka's JVM options
(stock for benchmarks, small for the compat suite), CPU pinning, volumes and the results notes."""

from __future__ import annotations

import argparse
import ctypes
import math
import mmap
import os
from pathlib import Path

import pytest

from bench import pinning
from bench.compare import FULL, GIB, QUICK, all_workloads, result_notes, scaled, select
from bench.load_result import LoadResult, back_to_back
from bench.page_cache import CHUNK, STALL_WINDOW, PageCacheFill
from bench.sysstat import meminfo_bytes
from bench.systems import make_broker
from compat_tests.brokers import PyBroker
from compat_tests.reference.apache_kafka import ApacheKafka

# kafka-server-start.sh's KAFKA_HEAP_OPTS, then kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS (4.3).
STOCK_FLAGS = (
    "-Xmx1G -Xms1G -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
    "-XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"
).split()


def _java_command(broker: object) -> list[str]:
    assert isinstance(broker, ApacheKafka)
    return broker._java("cp.jar", "kafka.Kafka", "server.properties")


def test_benchmark_kafka_runs_with_its_start_scripts_jvm_options(tmp_path: Path) -> None:
    command = _java_command(make_broker("kafka", tmp_path / "k"))
    assert command[1 : 1 + len(STOCK_FLAGS)] == STOCK_FLAGS
    assert any(arg.startswith("-Xlog:gc*:file=") for arg in command)  # kafka-server-start.sh's -loggc
    constrained = _java_command(make_broker("kafka-constrained", tmp_path / "c"))
    assert "-Xmx512m" in constrained and "-Xmx1G" not in constrained
    assert "-XX:MaxGCPauseMillis=20" not in constrained
    # The compat suite's launcher keeps its small heap unless told otherwise.
    assert _java_command(ApacheKafka(tmp_path / "compat"))[1:3] == ["-Xmx512m", "-Xms128m"]


def test_pinned_broker_runs_only_on_its_cpu(tmp_path: Path) -> None:
    assert not pinning.plan(enabled=False).enabled
    assert pinning.plan(enabled=False).broker_prefix() == []
    pins = pinning.plan()
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        assert not pins.enabled and "CPU" in pins.why_not
        return
    assert pins.broker_cpus == {allowed[0]} and pins.loader_cpus == set(allowed[1:])
    broker = make_broker("pybroker", tmp_path, command_prefix=pins.broker_prefix())
    assert isinstance(broker, PyBroker)
    broker.start()
    try:
        assert broker.pid is not None
        status = Path(f"/proc/{broker.pid}/status").read_text()
        cpus = next(line.split()[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list:"))
        assert cpus == str(allowed[0])
        for task in Path(f"/proc/{broker.pid}/task").iterdir():  # every thread, not just the first
            assert os.sched_getaffinity(int(task.name)) == {allowed[0]}
    finally:
        broker.stop()


def test_volumes_are_at_least_a_gigabyte_after_a_warm_up() -> None:
    assert FULL.bytes_per_run >= 10**9 and FULL.records(100) * 100 >= 10**9
    assert FULL.warmup_bytes >= 256 * 2**20
    assert FULL.sustained_bytes >= 6 * 10**9 and FULL.records(1024, sustained=True) * 1024 >= 6 * 10**9
    assert QUICK.bytes_per_run < FULL.bytes_per_run  # --quick stays a smoke run
    # A consume workload reads its 1 GiB back several times: one read lasts ~1.5 s.
    assert FULL.consume_passes >= 3 and QUICK.consume_passes == 1
    tiny = scaled(QUICK, 0.001, 1, 0.002)
    assert (tiny.bytes_per_run, tiny.warmup_bytes, tiny.sustained_bytes) == (
        2**30 // 1000,
        2**20,
        2**31 // 1000,
    )
    names = [w.name for w in all_workloads(quick=False, sustained=True)]
    assert {"sustained/1KiB/p1/acks1", "sustained/1KiB/p8/acks1"} <= set(names)
    assert not any(n.startswith("sustained") for n in (w.name for w in all_workloads(quick=False)))
    assert [w.name for w in select(all_workloads(False, True), "sustained/*/p1/*")] == [
        "sustained/1KiB/p1/acks1"
    ]


def test_results_notes_name_both_kafka_settings_the_cpus_and_the_volumes() -> None:
    args = argparse.Namespace(systems=["pybroker", "kafka"], runs=3, no_fill_page_cache=False)
    pins = pinning.Pinning(frozenset({0}), frozenset({1}))
    notes = "\n".join(result_notes(args, FULL, pins, "0.10 0.20 0.30"))
    assert "-Xmx1G -Xms1G" in notes and "-XX:MaxGCPauseMillis=20" in notes
    assert "`kafka-constrained` (not run)" in notes and "-Xmx512m" in notes
    assert "broker pinned to CPU 0 (taskset), loaders to CPU 1" in notes
    assert "1 GiB of payload per produce workload" in notes and "6 GiB per sustained" in notes
    assert "consume reads it back 3 times, each time in a fresh loader process" in notes
    assert "256 MiB are produced untimed with each loader in each of 4 shapes" in notes
    assert "load average when started: 0.10 0.20 0.30" in notes
    assert "kernel %: the share of that CPU time the broker spent in the kernel" in notes
    assert "written back (sync) and the page cache is filled with clean, cold pages until 512 MiB" in notes
    unpinned = "\n".join(result_notes(args, FULL, pinning.plan(enabled=False), "x"))
    assert "not pinned (--no-pin)" in unpinned
    as_found_args = argparse.Namespace(**{**vars(args), "no_fill_page_cache": True})
    as_found = "\n".join(result_notes(as_found_args, FULL, pins, "x"))
    assert "Memory state: as found (--no-fill-page-cache)." in as_found


def test_back_to_back_runs_count_every_record_over_the_sum_of_their_timed_spans() -> None:
    # 1,000 records at 500/s (2 s) and 3,000 at 1,000/s (3 s): 4,000 records in 5 s.
    combined = back_to_back([LoadResult(1000, 500.0, 1024), LoadResult(3000, 1000.0, 1024)])
    assert (combined.records, combined.records_per_s, combined.record_size) == (4000, 800.0, 1024)
    assert math.isnan(combined.p99_ms)  # percentiles of separate runs do not combine
    with pytest.raises(ValueError):
        back_to_back([])


def _resident_fraction(path: Path, offset: int, length: int) -> float:
    """The share of a file range's pages in the page cache (mincore(2) on a read-only mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    pages = length // mmap.PAGESIZE
    with open(path, "rb") as f:
        address = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), offset)
        assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vector = ctypes.create_string_buffer(pages)
            assert libc.mincore(address, length, vector) == 0, os.strerror(ctypes.get_errno())
            return sum(byte & 1 for byte in vector.raw) / pages
        finally:
            libc.munmap(address, length)


def test_page_cache_fill_reads_a_hole_into_the_page_cache(tmp_path: Path) -> None:
    with PageCacheFill(tmp_path, target_free_bytes=meminfo_bytes("MemFree") - 64 * 2**20) as fill:
        read = fill.top_up()
        assert read >= CHUNK and read % CHUNK == 0, read
        # The last chunk read is in the page cache (a file system that does not cache holes, tmpfs,
        # fails this), and the file takes no disk space.
        assert _resident_fraction(fill.path, read - CHUNK, CHUNK) >= 0.9
        assert os.stat(fill.path).st_blocks == 0
    assert not fill.path.exists()


class _ScriptedMemory:
    """MemFree as a function of what the filler has read: falls one for one down to a floor the
    kernel's reclaim keeps free (or, with ``floor`` None, without one)."""

    def __init__(self, free: int, floor: int | None) -> None:
        self.start, self.floor = free, floor
        self.calls = 0

    def __call__(self) -> int:
        read = self.calls * CHUNK  # one call before the first chunk, then one after each
        self.calls += 1
        return max(self.start - read, self.floor or 0)


def test_page_cache_fill_stops_at_its_target_or_when_free_memory_stops_falling(tmp_path: Path) -> None:
    mib = 2**20
    # Plenty free, no floor: reads exactly down to the target.
    with PageCacheFill(tmp_path, target_free_bytes=512 * mib, free_memory=_ScriptedMemory(GIB, None)) as fill:
        assert fill.top_up() == 512 * mib
    # The kernel keeps 768 MiB free: it reads down to that floor, then two windows of no progress.
    with PageCacheFill(
        tmp_path, target_free_bytes=64 * mib, free_memory=_ScriptedMemory(GIB, 768 * mib)
    ) as fill:
        read = fill.top_up()
        assert 256 * mib + STALL_WINDOW <= read <= 256 * mib + 3 * STALL_WINDOW, read / mib
        assert fill.cursor == read  # the next top-up goes on from there
    # Already at the target: nothing read.
    with PageCacheFill(tmp_path, target_free_bytes=2 * GIB, free_memory=_ScriptedMemory(GIB, None)) as fill:
        assert fill.top_up() == 0
