"""A broker that stops must stop replicating (found by the failure harness, tools/chaos: a bounced
broker kept fetching into closed logs after "shut down cleanly" and ignored SIGTERM until killed).

- a fetcher's wait for work ends on cancellation even when a wake-up arrives in the same loop turn
  (asyncio.wait_for before Python 3.12 returns instead of raising then, and the fetcher looped on);
- a fetcher manager that was shut down starts no fetcher for a state that arrives afterwards.
"""

from __future__ import annotations

import asyncio

from pybroker.replication.fetcher import InitialFetchState, ReplicaFetcher, ReplicaFetcherManager
from pybroker.replication.leader_endpoint import LocalLeaderEndpoint
from tests.replication.cluster import FAST


def endpoint(leader_id: int = 1) -> LocalLeaderEndpoint:
    return LocalLeaderEndpoint(leader_id, 2, lambda topic, index: None, lambda: 0)


def test_a_cancelled_wait_is_not_swallowed_by_a_simultaneous_wake_up():
    async def main() -> None:
        fetcher = ReplicaFetcher("ReplicaFetcher-0-2<-1", endpoint(), lambda t, i: None, FAST)
        waiting = asyncio.get_running_loop().create_task(fetcher._sleep(5.0))
        await asyncio.sleep(0)  # the task now waits for a wake-up or the 5 s
        fetcher._wake.set()  # a partition joins ...
        waiting.cancel()  # ... in the same loop turn as the loop's shutdown cancels every task
        await asyncio.wait({waiting}, timeout=2)
        assert waiting.done() and waiting.cancelled()

    asyncio.run(main())


def test_no_fetcher_starts_after_the_manager_shut_down():
    async def main() -> None:
        manager = ReplicaFetcherManager(2, endpoint, lambda t, i: None, FAST)
        manager.add_fetcher_for_partitions({("t", 0): InitialFetchState(1, 0, 0)})
        assert len(manager.fetchers) == 1
        await manager.shutdown()
        # A partition state delivered after the broker began to stop (a controlled shutdown's last
        # leadership changes): nothing may fetch into logs that are about to close.
        manager.add_fetcher_for_partitions({("t", 1): InitialFetchState(1, 0, 0)})
        assert manager.fetchers == {}
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("ReplicaFetcher")]

    asyncio.run(main())
