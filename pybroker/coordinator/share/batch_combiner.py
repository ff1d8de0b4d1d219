"""Kafka's PersisterStateBatchCombiner: the state batches so far and a write's batches as one list of
non-overlapping batches.

Batches wholly below the start offset are dropped and one that straddles it is cut at it (no pruning when
the start offset is -1, "unchanged"). Where batches overlap, each offset takes the delivery state of the
batch with the higher (delivery count, delivery state): a record's count and state only grow over its life,
so that is the newer information whichever write it came in. Adjacent batches of equal state and count are
joined. Kafka reaches the same list by repeatedly merging the first overlapping pair of a sorted set; here
the offsets are cut at every batch boundary and each piece takes its winner.
"""

from __future__ import annotations

from collections.abc import Iterable

from pybroker.coordinator.share.share_partition import StateBatch


def _priority(batch: StateBatch) -> tuple[int, int]:
    return batch.delivery_count, int(batch.delivery_state)


def combine(so_far: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int) -> tuple[StateBatch, ...]:
    batches: list[StateBatch] = []
    for b in (*so_far, *new):
        if start_offset != -1:
            if b.last_offset < start_offset:
                continue
            if b.first_offset < start_offset:
                b = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
        batches.append(b)
    if len(batches) < 2:
        return tuple(batches)
    bounds = sorted({b.first_offset for b in batches} | {b.last_offset + 1 for b in batches})
    out: list[StateBatch] = []
    for first, end in zip(bounds, bounds[1:], strict=False):
        covering = [b for b in batches if b.first_offset <= first and end - 1 <= b.last_offset]
        if not covering:
            continue  # a gap between batches stays a gap
        win = max(covering, key=_priority)
        last = out[-1] if out else None
        if last is not None and last.last_offset + 1 == first and _priority(last) == _priority(win):
            out[-1] = StateBatch(last.first_offset, end - 1, last.delivery_state, last.delivery_count)
        else:
            out.append(StateBatch(first, end - 1, win.delivery_state, win.delivery_count))
    return tuple(out)
