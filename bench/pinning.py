"""Keep the load generators off the broker's core: the broker on one CPU, everything else on the rest.

On a machine with at least two CPUs allowed to this process, the broker under test is started under
``taskset -c <first CPU>`` (its threads, JIT and GC included, stay there) and the benchmark process
itself, with the loaders it runs in-process (confluent-kafka) and the ones it starts (Kafka's Java
tools, the end-to-end consumer), moves to the other CPUs, which children inherit.  The broker's
CPU-seconds are then its own work, not time stolen by or from a loader.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass


@dataclass(frozen=True)
class Pinning:
    broker_cpus: frozenset[int] = frozenset()
    loader_cpus: frozenset[int] = frozenset()
    why_not: str = ""  # set when pinning is off, for the results notes

    @property
    def enabled(self) -> bool:
        return bool(self.broker_cpus)

    def broker_prefix(self) -> list[str]:
        """A command prefix that starts the broker on its CPUs (empty when not pinning)."""
        if not self.enabled:
            return []
        return ["taskset", "-c", ",".join(str(cpu) for cpu in sorted(self.broker_cpus))]

    def pin_loaders(self) -> None:
        """Move this process (and so every child started from now on) to the loader CPUs."""
        if self.enabled:
            os.sched_setaffinity(0, self.loader_cpus)

    def describe(self) -> str:
        if not self.enabled:
            return f"not pinned ({self.why_not})"
        return (
            f"broker pinned to CPU {','.join(map(str, sorted(self.broker_cpus)))} (taskset), "
            f"loaders to CPU {','.join(map(str, sorted(self.loader_cpus)))}"
        )


def plan(enabled: bool = True) -> Pinning:
    """Broker on the lowest allowed CPU, loaders on the others; off when asked or not possible."""
    if not enabled:
        return Pinning(why_not="--no-pin")
    if not hasattr(os, "sched_getaffinity"):
        return Pinning(why_not="no CPU affinity on this OS")
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return Pinning(why_not=f"only {len(allowed)} CPU allowed")
    if shutil.which("taskset") is None:
        return Pinning(why_not="taskset (util-linux) not installed")
    return Pinning(frozenset(allowed[:1]), frozenset(allowed[1:]))
