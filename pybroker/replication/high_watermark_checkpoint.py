"""The high watermarks of a broker's partitions, kept across restarts (Kafka's
``replication-offset-checkpoint`` in every log directory, written by ReplicaManager every
``replica.high.watermark.checkpoint.interval.ms`` and at shutdown).

On one broker the high watermark is the log end offset and needs no file.  In a cluster a
restarted broker must not take its log end for committed: it starts from the checkpointed high
watermark (bounded by its log), and the leader's fetch answers move it on from there.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pybroker.storage.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from pybroker.storage.errors import StorageError

if TYPE_CHECKING:
    from pybroker.replication.partition import Partition

log = logging.getLogger(__name__)

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"


def checkpoint_high_watermarks(partitions: Iterable[Partition]) -> None:
    """Write every partition's high watermark into its log directory's checkpoint (atomically:
    the file is replaced whole)."""
    by_dir: dict[Path, dict[tuple[str, int], int]] = defaultdict(dict)
    for p in partitions:
        by_dir[p.log.directory.parent][(p.topic, p.index)] = p.high_watermark
    for log_dir, offsets in by_dir.items():
        write_offset_checkpoint(log_dir / HIGH_WATERMARK_CHECKPOINT, offsets)


def read_high_watermarks(log_dirs: Iterable[Path]) -> dict[tuple[str, int], int]:
    """Every partition's checkpointed high watermark in these directories (a malformed file is
    logged and ignored: the partitions then start from their log start offset)."""
    found: dict[tuple[str, int], int] = {}
    for log_dir in log_dirs:
        try:
            found.update(read_offset_checkpoint(Path(log_dir) / HIGH_WATERMARK_CHECKPOINT))
        except StorageError as e:
            log.warning("ignoring %s: %s", Path(log_dir) / HIGH_WATERMARK_CHECKPOINT, e)
    return found


def restore_high_watermark(p: Partition, checkpointed: dict[tuple[str, int], int]) -> None:
    """Start ``p`` from its checkpointed high watermark, bounded by its log; a partition without
    one starts at its log start offset (nothing is known to be committed: Kafka does the same)."""
    hw = checkpointed.get((p.topic, p.index), p.log.log_start_offset)
    p.high_watermark = max(p.log.log_start_offset, min(hw, p.log.log_end_offset))
