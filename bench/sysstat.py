"""What a broker process costs, read from /proc: peak resident memory and CPU seconds.

The peak (VmHWM) can be reset between workloads by writing 5 to /proc/PID/clear_refs (Linux 4.0+),
so one long-running broker yields one peak per workload.  For Apache Kafka the pid is the JVM,
whose RSS includes the Java heap the launcher gives it.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from pathlib import Path


def _status_kib(pid: int, field: str) -> int | None:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def peak_rss_mb(pid: int) -> float:
    """VmHWM in MiB: the highest resident set since start (or since the last reset)."""
    kib = _status_kib(pid, "VmHWM")
    return kib / 1024 if kib is not None else float("nan")


def rss_mb(pid: int) -> float:
    kib = _status_kib(pid, "VmRSS")
    return kib / 1024 if kib is not None else float("nan")


def reset_peak_rss(pid: int) -> bool:
    """Set VmHWM back to the current RSS; False where the kernel does not allow it."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process so far (all its threads), to the nanosecond where possible.

    /proc/PID/stat counts the whole thread group, exited threads included, but in clock ticks
    (10 ms): a toy load costing a few milliseconds measured 0.  Each live thread's schedstat
    holds its own run time in nanoseconds, but forgets threads that have exited.  The true total
    is at least either, so the larger of the two is the closer reading.
    """
    user, system = user_and_system_seconds(pid)
    return max(user + system, _live_threads_run_time(pid))


def user_and_system_seconds(pid: int | str, tid: int | str | None = None) -> tuple[float, float]:
    """User and system (kernel) CPU time so far, in clock ticks: of the whole process, or of one of its
    threads (``tid``; ``pid`` may be "self")."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    # The command name in field 2 may contain spaces and parentheses: split after the last ")".
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_idle_seconds(cpus: Iterable[int]) -> float:
    """Idle and iowait time of ``cpus`` so far (/proc/stat), in seconds.

    Why idle and not the busy fields: on this kernel (tick-based CPU accounting, the tick stopped on
    an idle CPU) a CPU's user and system times are counted at the 250 Hz tick, and a CPU that wakes
    for a short burst and sleeps again before its next tick adds nothing to them, while its idle time
    is measured to the nanosecond.  Measured 2026-11-28: pybroker, pinned to CPU 0, ran 2.1 s (its
    schedstat) in an 8 s load, CPU 0's user + system ticks said 1.05 s, 8 s less its idle time 2.2 s.
    So how busy CPUs were is the wall time less their idle time (``busy_share``)."""
    wanted = {f"cpu{cpu}" for cpu in cpus}
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    with open("/proc/stat", "rb") as f:
        for line in f:
            fields = line.split()
            if fields and fields[0].decode() in wanted:
                total += int(fields[4]) + int(fields[5])  # idle, iowait
    return total / tick


def busy_share(cpus: Collection[int], idle_s: float, elapsed_s: float) -> float:
    """The share of ``cpus``' time in ``elapsed_s`` of wall time that was not idle (``idle_s`` of
    their idle time in it, from ``cpu_idle_seconds``), clamped to [0, 1]; NaN without CPUs or time."""
    if not cpus or elapsed_s <= 0:
        return float("nan")
    return min(1.0, max(0.0, 1.0 - idle_s / (elapsed_s * len(cpus))))


def _live_threads_run_time(pid: int) -> float:
    total_ns = 0
    for schedstat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total_ns += int(schedstat.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread exited between the listing and the read
    return total_ns / 1e9


def meminfo_bytes(field: str) -> int:
    """One /proc/meminfo field ("MemTotal", "MemFree", "Cached", …) in bytes."""
    with open("/proc/meminfo", "rb") as f:
        for line in f:
            name, _, rest = line.partition(b":")
            if name.decode() == field:
                return int(rest.split()[0]) * 1024
    raise KeyError(field)


def machine_description() -> str:
    """One line: CPU model and count, memory, kernel — for the results file."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_gib = meminfo_bytes("MemTotal") / 2**30
    except (OSError, KeyError):
        mem_gib = float("nan")
    uname = os.uname()
    return f"{os.cpu_count()} vCPU {model}, {mem_gib:.0f} GiB RAM, {uname.sysname} {uname.release}"


def load_average() -> str:
    """The 1/5/15-minute load averages, e.g. '0.12 0.30 0.41' (is the machine quiet?)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"
