"""What the authorizer costs on the produce path: pybroker with ``authorizer.class.name`` off and on.

    python -m bench.authorizer [--requests 5000] [--runs 3] [--acls 1000]

With the authorizer on the broker holds ``--acls`` ACLs for other principals (LITERAL, PREFIXED and on
other resource types, so the index is not trivially empty) plus one ALLOW Write for ``User:ANONYMOUS``
on the topic. One client sends ``--requests`` one-record Produce requests back to back (acks=1, each
waiting for its answer: the per-request cost is what shows), runs interleaved off/on; the table gives
the median requests/s (noisy on a loaded machine). Then ``Authorizer.authorize`` alone (a decision first
made from the index, then answered from the decision cache) and the produce handler's whole
authorization step through a RequestContext: the stable numbers. Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from compat_tests.brokers import PyBroker
from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from pybroker.security.authorizer import Authorizer
from tests.wire import WireClient

TOPIC = "bench-acl"


def _acls(count: int) -> list[AclBinding]:
    out = []
    for i in range(count):
        rtype = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)[i % 3]
        pattern = PatternType.PREFIXED if i % 4 == 0 else PatternType.LITERAL
        out.append(
            AclBinding(
                rtype, f"res-{i}", pattern, f"User:user-{i % 50}", "*", AclOperation.WRITE, AclPermissionType.ALLOW
            )
        )
    out.append(
        AclBinding(
            ResourceType.TOPIC, TOPIC, PatternType.LITERAL, "User:ANONYMOUS", "*", AclOperation.WRITE,
            AclPermissionType.ALLOW,
        )
    )  # fmt: skip
    return out


def _create_acls(bootstrap: str, acls: list[AclBinding]) -> None:
    with WireClient(bootstrap) as wire:
        for start in range(0, len(acls), 200):
            response = wire.request(
                30,
                3,
                {
                    "creations": [
                        {
                            "resource_type": a.resource_type,
                            "resource_name": a.resource_name,
                            "resource_pattern_type": a.pattern_type,
                            "principal": a.principal,
                            "host": a.host,
                            "operation": a.operation,
                            "permission_type": a.permission_type,
                        }
                        for a in acls[start : start + 200]
                    ]
                },
            )
            assert all(r["error_code"] == 0 for r in response["results"]), response


def _produce_rate(bootstrap: str, requests: int) -> float:
    batch = build_batch([SimpleRecord(None, b"x" * 100)])
    body = {
        "acks": 1,
        "timeout_ms": 10000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
    }
    with WireClient(bootstrap) as wire:
        wire.request(
            19,
            7,
            {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
             "timeout_ms": 10000, "validate_only": False},
        )  # fmt: skip  (TOPIC_ALREADY_EXISTS after the first run)
        wire.request(0, 9, body)  # warm-up
        started = time.perf_counter()
        for _ in range(requests):
            code = wire.request(0, 9, body)["responses"][0]["partition_responses"][0]["error_code"]
            if code != 0:
                raise RuntimeError(f"produce failed with error {code}")
        return requests / (time.perf_counter() - started)


def _decision_costs(count: int) -> tuple[float, float]:
    authorizer = Authorizer(frozenset(), False)
    authorizer.create_acls(_acls(count))
    n = 200_000
    started = time.perf_counter()
    for i in range(n):  # distinct topics: every decision is made from the index
        authorizer._decide("User:ANONYMOUS", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, f"t-{i}")
    first = (time.perf_counter() - started) / n * 1e9
    started = time.perf_counter()
    for _ in range(n):
        authorizer.authorize("User:ANONYMOUS", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, TOPIC)
    cached = (time.perf_counter() - started) / n * 1e9
    return first, cached


def _handler_check_cost(count: int) -> float:
    """The produce handler's authorization step alone (apis.auth), through a real RequestContext: us."""
    from types import SimpleNamespace

    from pybroker.apis import RequestContext, auth
    from pybroker.security.context import plaintext_context

    authorizer = Authorizer(frozenset(), False)
    authorizer.create_acls(_acls(count))
    ctx = RequestContext(SimpleNamespace(authorizer=authorizer), None, "127.0.0.1:1", None, plaintext_context("127.0.0.1", 1))  # type: ignore[arg-type]
    topic_data = [{"name": TOPIC, "partition_data": []}]
    n = 100_000
    started = time.perf_counter()
    for _ in range(n):
        if auth.enabled(ctx):
            auth.denied(ctx, auth.WRITE, auth.TOPIC, (td["name"] for td in topic_data))
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--acls", type=int, default=1000)
    args = parser.parse_args()
    on_settings = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    rates: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="bench-acl-") as tmp:
        brokers = {
            "off": PyBroker(Path(tmp) / "off"),
            # allow.everyone: true only to let the benchmark's ANONYMOUS client create the ACLs.
            "on": PyBroker(Path(tmp) / "on", overrides={**on_settings, "allow.everyone.if.no.acl.found": "true"}),
        }
        for b in brokers.values():
            b.start()
        try:
            _create_acls(brokers["on"].bootstrap, _acls(args.acls))
            for run in range(args.runs):
                order = ["off", "on"] if run % 2 == 0 else ["on", "off"]  # neither always goes first
                for name in order:
                    rates[name].append(_produce_rate(brokers[name].bootstrap, args.requests))
        finally:
            for b in brokers.values():
                b.stop()
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    print(f"Produce, one 100-byte record per request, acks=1, {args.requests} requests x {args.runs} runs")
    print(f"{'authorizer':<12}{'ACLs':>8}{'requests/s (median)':>22}{'runs':>40}")
    print(f"{'off':<12}{0:>8}{off:>22.0f}{'  '.join(f'{r:.0f}' for r in rates['off']):>40}")
    print(f"{'on':<12}{args.acls + 1:>8}{on:>22.0f}{'  '.join(f'{r:.0f}' for r in rates['on']):>40}")
    print(f"on/off: {on / off:.3f}")
    first, cached = _decision_costs(args.acls)
    print(f"\nAuthorizer.authorize with {args.acls + 1} ACLs: {first:.0f} ns a decision made from the index, "
          f"{cached:.0f} ns answered from the decision cache")  # fmt: skip
    print(f"The produce handler's authorization step (one topic): {_handler_check_cost(args.acls):.2f} us a request")


if __name__ == "__main__":
    main()
