"""Do the replicas agree?  Every replica's log of a partition, read from each node's own data directory.

After a run (writers stopped, every node back and in every ISR) each replica of a partition must hold
the same batches at the same offsets: a leader deposed while frozen or cut off that kept records the
new leader never had must have truncated them when it came back (KIP-101/279), or its log diverges from
the others' at that offset.  The consumer-side checker cannot see this (it reads only the leader), so the
harness reads the segment files of every node directly: Kafka's layout and batch format
(``<log.dirs>/<topic>-<partition>/<base offset>.log``) are the same for pybroker and Apache Kafka.

A batch is fingerprinted by (base offset, last offset, CRC): a follower stores the leader's batch bytes
as they are, and the CRC covers everything but the partition leader epoch and the base offset.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any, Protocol

Fingerprint = tuple[int, int, int]  # base offset, last offset, CRC

_HEADER = struct.Struct(">qiiBIhi")  # base offset, length, leader epoch, magic, crc, attributes, last delta
_LOG_OVERHEAD = 12  # base offset + length


class HasDataDirs(Protocol):
    def node_ids(self) -> list[int]: ...
    def data_dir(self, node_id: int) -> Path: ...


def read_fingerprints(partition_dir: Path) -> list[Fingerprint]:
    """The batches of one replica's log, in offset order; a torn or zero tail (a crash, preallocation)
    ends the read of its segment."""
    batches: list[Fingerprint] = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + _HEADER.size <= len(data):
            base, length, _epoch, magic, crc, _attributes, last_delta = _HEADER.unpack_from(data, position)
            end = position + _LOG_OVERHEAD + length
            if length <= 0 or magic != 2 or end > len(data):
                break
            batches.append((base, base + last_delta, crc))
            position = end
    return batches


def compare_replicas(
    cluster: HasDataDirs, topic: str, partitions: int, replicas: dict[int, list[int]] | None = None
) -> dict[str, Any]:
    """One comparison: per partition, the nodes whose log differs from the longest one's, and where.
    ``replicas`` (partition -> node ids) defaults to every node."""
    result: dict[str, Any] = {"partitions": {}, "divergent": []}
    for partition in range(partitions):
        logs: dict[int, list[Fingerprint]] = {}
        for node in (replicas or {}).get(partition, cluster.node_ids()):
            path = cluster.data_dir(node) / f"{topic}-{partition}"
            logs[node] = read_fingerprints(path) if path.is_dir() else []
        reference_node = max(logs, key=lambda n: (len(logs[n]), -n))
        reference = logs[reference_node]
        summary: dict[str, Any] = {
            "end_offset": {str(n): (batches[-1][1] + 1 if batches else 0) for n, batches in logs.items()},
            "batches": {str(n): len(batches) for n, batches in logs.items()},
        }
        differences = {}
        for node, batches in logs.items():
            if batches != reference:
                first = next(
                    (i for i, (a, b) in enumerate(zip(batches, reference, strict=False)) if a != b),
                    min(len(batches), len(reference)),
                )
                at = batches[first][0] if first < len(batches) else (reference[first][0] if first < len(reference) else -1)
                differences[str(node)] = {"first_difference_at_offset": at, "vs_node": reference_node}
        if differences:
            summary["differences"] = differences
            result["divergent"].append(partition)
        result["partitions"][str(partition)] = summary
    return result


def wait_replicas_agree(
    cluster: HasDataDirs, topic: str, partitions: int, timeout_s: float = 30.0,
    replicas: dict[int, list[int]] | None = None,
) -> dict[str, Any]:
    """Compare until every replica agrees (followers may still be fetching the last batches) or
    ``timeout_s`` passes; the last comparison, with ``agree`` and how long it took."""
    started = time.monotonic()
    while True:
        result = compare_replicas(cluster, topic, partitions, replicas)
        if not result["divergent"] or time.monotonic() - started > timeout_s:
            result["agree"] = not result["divergent"]
            result["waited_s"] = round(time.monotonic() - started, 1)
            return result
        time.sleep(1.0)  # poll interval: a follower one fetch behind catches up within a second
