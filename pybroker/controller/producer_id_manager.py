"""Producer ids unique across a ZooKeeper cluster: Kafka's ZkProducerIdManager.

Each broker claims blocks of ids from ``/latest_producer_id_block`` with a conditional write (the znode's
version), so two brokers never hand out the same id. Without that, two brokers could give two producers
the same id, and after a leadership change one partition leader would see the other producer's sequence
numbers as its own (OUT_OF_ORDER_SEQUENCE, or a batch taken for a duplicate and silently dropped).

Claiming a block is a ZooKeeper round trip: the next block is claimed in a thread when the current one
is 90 % used (as Kafka's RPCProducerIdManager prefetches), so allocation on the event loop never waits
on ZooKeeper. Should both be used up before ZooKeeper answers, allocation fails with the retriable
COORDINATOR_LOAD_IN_PROGRESS, as KRaft brokers answer while their next block is on its way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pybroker.protocol.errors import ErrorCode, KafkaError

logger = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
PREFETCH_FRACTION = 0.9


class ProducerIdManager:
    """Hands out ids from claimed blocks; ``claim_block()`` returns (first id, last id) of a new block."""

    def __init__(self, claim_block: Callable[[], tuple[int, int]]) -> None:
        self._claim_block = claim_block
        self._lock = threading.Lock()
        self._next = 0
        self._last = -1  # the current block is [first, _last]; empty until the first claim
        self._prefetched: tuple[int, int] | None = None
        self._prefetching = False

    def start(self) -> None:
        """Claim the first block (blocking: call it from a worker thread, before serving)."""
        first, last = self._claim_block()
        with self._lock:
            self._next, self._last = first, last

    def generate_producer_id(self) -> int:
        with self._lock:
            if self._next > self._last and self._prefetched is not None:
                self._next, self._last = self._prefetched
                self._prefetched = None
            if self._next > self._last:
                self._prefetch_locked()
                raise KafkaError(
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the next producer id block is being claimed"
                )
            pid = self._next
            self._next += 1
            if (
                self._prefetched is None
                and self._next >= self._last - (1 - PREFETCH_FRACTION) * PRODUCER_ID_BLOCK_SIZE
            ):
                self._prefetch_locked()
            return pid

    def _prefetch_locked(self) -> None:
        if self._prefetching:
            return
        self._prefetching = True
        threading.Thread(target=self._prefetch, name="producer-id-block", daemon=True).start()

    def _prefetch(self) -> None:
        try:
            block = self._claim_block()
        except Exception:  # noqa: BLE001 - logged; the next allocation tries again
            logger.exception("claiming a producer id block from ZooKeeper failed")
            block = None
        with self._lock:
            self._prefetching = False
            if block is not None:
                self._prefetched = block
