"""The brokers a benchmark compares, started the same way with the same settings.

All get the settings in ``MATCHED_SETTINGS`` on top of their defaults; none fsyncs per message
(log.flush.* stays at its default, i.e. the OS page cache decides, on all).

- ``kafka``: Apache Kafka 4.3.1 with the JVM options of its own start script (kafka-server-start.sh:
  -Xmx1G -Xms1G, kafka-run-class.sh's G1 settings, GC log on): the reference every ratio is taken to.
- ``kafka-constrained``: the same broker with a small growable heap and G1's defaults
  (-Xmx512m -Xms128m), what the compat suite runs; shown for comparison, never a ratio's base.
- ``pybroker``: as installed, i.e. with the produce path's modules compiled by Cython when the install
  built them (pybroker/_compiled.py).
- ``pybroker-pure``: the same install with ``PYBROKER_PURE_PYTHON=1``: every module from its ``.py``, so
  the compiled modules' gain is measured interleaved in one run.
- ``pybroker-baseline``: pybroker from another checkout (``PYBROKER_BASELINE_TREE``, e.g. a worktree
  of the commit before a change), so a change's before and after are measured interleaved in one run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from compat_tests.brokers import PyBroker
from pybroker._compiled import PURE_PYTHON_ENV

SYSTEMS = ("pybroker", "pybroker-pure", "pybroker-baseline", "kafka", "kafka-constrained")

MATCHED_SETTINGS: dict[str, str] = {
    "log.segment.bytes": str(1024 * 1024 * 1024),  # Kafka's default, stated on both
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
}


class Broker(Protocol):
    @property
    def pid(self) -> int | None: ...

    def start(self, timeout_s: float = ...) -> str: ...

    def stop(self, timeout_s: float = ...) -> object: ...


def kafka_jvm_descriptions() -> dict[str, str]:
    """System name -> the JVM options it runs with, for the results notes."""
    from compat_tests.reference.apache_kafka import CONSTRAINED, STOCK

    return {"kafka": STOCK.describe(), "kafka-constrained": CONSTRAINED.describe()}


def make_broker(
    system: str, workdir: Path, overrides: dict[str, str] | None = None, command_prefix: Sequence[str] = ()
) -> Broker:
    """``command_prefix`` (e.g. ``taskset -c 0``) wraps the broker's own process."""
    settings = {**MATCHED_SETTINGS, **(overrides or {})}
    if system in ("kafka", "kafka-constrained"):
        from compat_tests.reference.apache_kafka import CONSTRAINED, STOCK, ApacheKafka

        jvm = STOCK if system == "kafka" else CONSTRAINED
        return ApacheKafka(workdir, overrides=settings, jvm=jvm, command_prefix=command_prefix)
    if system == "pybroker":
        return PyBroker(workdir, overrides=settings, command_prefix=list(command_prefix))
    if system == "pybroker-pure":
        env = {PURE_PYTHON_ENV: "1"}
        return PyBroker(workdir, overrides=settings, env=env, command_prefix=list(command_prefix))
    if system == "pybroker-baseline":
        tree = os.environ.get("PYBROKER_BASELINE_TREE")
        if not tree or not (Path(tree) / "pybroker" / "__init__.py").is_file():
            raise ValueError("pybroker-baseline needs PYBROKER_BASELINE_TREE=<a pybroker checkout>")
        # The broker process imports pybroker from that tree first (an editable install points here).
        env = {"PYTHONPATH": str(Path(tree).resolve())}
        return PyBroker(workdir, overrides=settings, env=env, command_prefix=list(command_prefix))
    raise ValueError(f"unknown system {system!r}; expected one of {', '.join(SYSTEMS)}")


def broker_pid(broker: Broker) -> int:
    pid = broker.pid
    if pid is None:
        raise RuntimeError("broker is not running")
    return pid
