"""The ACL decision matrix (issue 14): the same ACLs, the same requests, the same decisions as Kafka.

A broker with the authorizer on, ``allow.everyone.if.no.acl.found=false`` and ``User:admin`` as the only
super user (``sasl_acl_broker`` of test_acls.py). For each cell — a resource type, the operation a request
needs, and a set of ACLs (the principal ``User:alice``, ``User:*`` or ``User:bob``; the host ``*``,
``127.0.0.1`` or another; LITERAL, PREFIXED or the ``*`` wildcard; ALLOW and DENY; the operation itself,
ALL, one that implies it or an unrelated one) — the admin creates the ACLs on a resource of the cell's own,
then ``User:alice``, authenticated with SASL/PLAIN from 127.0.0.1, sends the one raw request that needs
that operation, and the answer's error code says allowed or refused (with Kafka's code for a refusal:
TOPIC_, GROUP_, CLUSTER_ or TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Every cell is checked against
StandardAuthorizer's rules (``expected`` below), on both brokers, so the two agree cell for cell.

Cells on topics, groups and transactional ids each use resources of their own name, so all their ACLs
are created in one CreateAcls and checked together; the wildcard-resource and the cluster cells change
what every request sees, so they run one at a time.

On a 3-node cluster (``--broker pybroker-cluster``/``kafka-cluster``, the authorizer on every node) each
request goes where a client sends it (``Connections``): a partition's to its leader, a group's or a
transaction's to its coordinator; and an ACL change is waited for on every node before a decision is read.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from pybroker.records.builder import SimpleRecord, build_batch
from tests.wire import WireClient

from .support import coordinator_address, leader_address, wait_for
from .test_acls import sasl_acl_broker  # noqa: F401  (the module's broker)

# Kafka's codes (org.apache.kafka.common.{resource,acl}).
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
DESCRIBE_CONFIGS, ALTER_CONFIGS = 10, 11
DENY, ALLOW = 2, 3
REFUSED = {TOPIC: 29, GROUP: 30, CLUSTER: 31, TRANSACTIONAL_ID: 53}  # *_AUTHORIZATION_FAILED
# StandardAuthorizer: an ALLOW of one of these operations also allows the key (never a DENY).
IMPLIED_BY = {DESCRIBE: {READ, WRITE, DELETE, ALTER}, DESCRIBE_CONFIGS: {ALTER_CONFIGS}}
ALICE, BOB, EVERYONE = "User:alice", "User:bob", "User:*"
OTHER_HOST = "10.9.9.9"
CLUSTER_NAME = "kafka-cluster"


@dataclass(frozen=True)
class Acl:
    principal: str
    operation: int
    permission: int = ALLOW
    pattern: int = LITERAL
    name: str | None = None  # the cell's resource when None
    host: str = "*"


@dataclass
class Cell:
    resource_type: int
    operation: int
    label: str
    acls: tuple[Acl, ...]
    resource: str = ""
    bindings: list[dict] = field(default_factory=list)


def expected(cell: Cell, principal: str = ALICE, host: str = "127.0.0.1") -> bool:
    """StandardAuthorizer's decision (no super user; allow.everyone.if.no.acl.found=false)."""
    matching = []
    for b in cell.bindings:
        name = b["resource_name"]
        if b["resource_pattern_type"] == LITERAL:
            on_resource = name in (cell.resource, "*")
        else:
            on_resource = cell.resource.startswith(name)
        if on_resource and b["principal"] in (principal, EVERYONE) and b["host"] in (host, "*"):
            matching.append(b)
    if any(b["permission_type"] == DENY and b["operation"] in (cell.operation, ALL) for b in matching):
        return False
    allowing = {cell.operation, ALL} | IMPLIED_BY.get(cell.operation, set())
    return any(b["permission_type"] == ALLOW and b["operation"] in allowing for b in matching)


def variants(operation: int, unrelated: int, implying: tuple[int, ...]) -> list[tuple[str, tuple[Acl, ...]]]:
    """The ACL sets every (resource type, operation) is tried with."""
    base = Acl(ALICE, operation)
    out: list[tuple[str, tuple[Acl, ...]]] = [
        ("no ACL", ()),
        ("ALLOW the operation", (base,)),
        ("ALLOW ALL", (Acl(ALICE, ALL),)),
        ("ALLOW an unrelated operation", (Acl(ALICE, unrelated),)),
        ("ALLOW User:*", (Acl(EVERYONE, operation),)),
        ("ALLOW another principal", (Acl(BOB, operation),)),
        ("ALLOW from 127.0.0.1", (Acl(ALICE, operation, host="127.0.0.1"),)),
        ("ALLOW from another host", (Acl(ALICE, operation, host=OTHER_HOST),)),
        ("ALLOW PREFIXED, matching", (Acl(ALICE, operation, pattern=PREFIXED, name="{prefix}"),)),
        ("ALLOW PREFIXED, not matching", (Acl(ALICE, operation, pattern=PREFIXED, name="{other}"),)),
        ("ALLOW the whole name as a PREFIX", (Acl(ALICE, operation, pattern=PREFIXED, name="{resource}"),)),
        ("ALLOW another LITERAL name", (Acl(ALICE, operation, name="{other}"),)),
        ("ALLOW + DENY the operation", (base, Acl(ALICE, operation, DENY))),
        ("ALLOW + DENY ALL to User:* PREFIXED", (base, Acl(EVERYONE, ALL, DENY, PREFIXED, "{prefix}"))),
        ("ALLOW + DENY from another host", (base, Acl(ALICE, operation, DENY, host=OTHER_HOST))),
        ("ALLOW + DENY another principal", (base, Acl(BOB, operation, DENY))),
        ("ALLOW + DENY an unrelated operation", (base, Acl(ALICE, unrelated, DENY))),
        ("ALLOW ALL + DENY an unrelated operation", (Acl(ALICE, ALL), Acl(ALICE, unrelated, DENY))),
        ("DENY only", (Acl(ALICE, operation, DENY),)),
    ]
    for op in implying:
        out.append((f"ALLOW implying operation {op}", (Acl(ALICE, op),)))
        out.append((f"ALLOW implying operation {op} + DENY it", (Acl(ALICE, op), Acl(ALICE, op, DENY))))
        out.append(
            (
                f"ALLOW implying operation {op} + DENY the operation",
                (Acl(ALICE, op), Acl(ALICE, operation, DENY)),
            )
        )
    return out


# (resource type, operation) -> (an unrelated operation, the operations implying it)
CHECKED = {
    (TOPIC, READ): (WRITE, ()),
    (TOPIC, WRITE): (READ, ()),
    (TOPIC, DESCRIBE): (CREATE, (READ, WRITE, DELETE, ALTER)),
    (TOPIC, DELETE): (READ, ()),
    (TOPIC, ALTER): (WRITE, ()),
    (TOPIC, DESCRIBE_CONFIGS): (READ, (ALTER_CONFIGS,)),
    (TOPIC, ALTER_CONFIGS): (DESCRIBE_CONFIGS, ()),
    (GROUP, READ): (DELETE, ()),
    (GROUP, DESCRIBE): (DELETE, (READ,)),
    (GROUP, DELETE): (READ, ()),
    (TRANSACTIONAL_ID, WRITE): (DESCRIBE, ()),
    (TRANSACTIONAL_ID, DESCRIBE): (READ, (WRITE,)),
    (CLUSTER, DESCRIBE): (CREATE, (ALTER,)),
    (CLUSTER, ALTER): (DESCRIBE, ()),
    (CLUSTER, DESCRIBE_CONFIGS): (DESCRIBE, (ALTER_CONFIGS,)),
}


def make_cells(resource_type: int, run: str) -> list[Cell]:
    cells = []
    for (rtype, operation), (unrelated, implying) in CHECKED.items():
        if rtype != resource_type:
            continue
        for i, (label, acls) in enumerate(variants(operation, unrelated, implying)):
            if rtype == CLUSTER and any(a.pattern == PREFIXED or a.name == "{other}" for a in acls):
                continue  # the cluster resource has one name; Kafka refuses other cluster patterns
            prefix = f"m{run}o{operation}v{i}"
            resource = CLUSTER_NAME if rtype == CLUSTER else f"{prefix}-r"
            cell = Cell(rtype, operation, label, acls, resource)
            names = {"{prefix}": prefix, "{other}": f"x{prefix}", "{resource}": resource}
            cell.bindings = [
                {
                    "resource_type": rtype,
                    "resource_name": resource if a.name is None else names[a.name],
                    "resource_pattern_type": a.pattern,
                    "principal": a.principal,
                    "host": a.host,
                    "operation": a.operation,
                    "permission_type": a.permission,
                }
                for a in acls
            ]
            cells.append(cell)
    return cells


# -- the wire: SASL/PLAIN connections, ACL management, one request per operation ----------------------
def sasl_wire(bootstrap: str, user: str) -> WireClient:
    wire = WireClient(bootstrap)
    handshake = wire.request(17, 1, {"mechanism": "PLAIN"})
    assert handshake["error_code"] == 0, handshake
    auth = wire.request(36, 2, {"auth_bytes": f"\0{user}\0{user}-secret".encode()})
    assert auth["error_code"] == 0, auth
    return wire


class Connections:
    """One user's SASL/PLAIN connections to the nodes of the SASL listener, each opened when a request
    first goes there. A raw request goes where a client sends it: a partition's to its leader, a group's
    or a transaction's to its coordinator (on a cluster another node answers NOT_LEADER_OR_FOLLOWER or
    NOT_COORDINATOR, not the decision under test), every other one to the first broker. ``finder`` looks
    the leaders and coordinators up: the super user's connections, which may describe every resource, so
    a cell's request reaches the node that decides it whatever the cell's ACLs allow the user to see."""

    def __init__(self, bootstrap: str, user: str, finder: Connections | None = None) -> None:
        self.addresses = bootstrap.split(",")
        self.user = user
        self.finder = finder or self
        self._open: dict[str, WireClient] = {}
        self.first = self.at(self.addresses[0])

    def at(self, address: str) -> WireClient:
        if address not in self._open:
            self._open[address] = sasl_wire(address, self.user)
        return self._open[address]

    def every_node(self) -> list[WireClient]:
        return [self.at(address) for address in self.addresses]

    def leader(self, topic: str) -> WireClient:
        return self.at(leader_address(self.finder.first, topic) or self.addresses[0])

    def coordinator(self, key: str, key_type: int) -> WireClient:
        return self.at(coordinator_address(self.finder.first, key, key_type))

    def close(self) -> None:
        for wire in self._open.values():
            wire.close()


def create_acls(admin: Connections, bindings: list[dict]) -> None:
    for start in range(0, len(bindings), 500):
        response = admin.first.request(30, 3, {"creations": bindings[start : start + 500]})
        errors = [r for r in response["results"] if r["error_code"]]
        assert not errors, errors


def delete_acls(admin: Connections, bindings: list[dict]) -> None:
    filters = [
        {
            "resource_type_filter": b["resource_type"],
            "resource_name_filter": b["resource_name"],
            "pattern_type_filter": b["resource_pattern_type"],
            "principal_filter": b["principal"],
            "host_filter": b["host"],
            "operation": b["operation"],
            "permission_type": b["permission_type"],
        }
        for b in bindings
    ]
    response = admin.first.request(31, 3, {"filters": filters})
    assert not [r for r in response["filter_results"] if r["error_code"]], response


def acl_count(node: WireClient, binding: dict) -> int:
    response = node.request(
        29,
        3,
        {
            "resource_type_filter": binding["resource_type"],
            "resource_name_filter": binding["resource_name"],
            "pattern_type_filter": binding["resource_pattern_type"],
            "principal_filter": binding["principal"],
            "host_filter": binding["host"],
            "operation": binding["operation"],
            "permission_type": binding["permission_type"],
        },
    )
    assert response["error_code"] == 0, response
    return sum(len(r["acls"]) for r in response["resources"])


def wait_until_applied(admin: Connections, bindings: list[dict], present: bool) -> None:
    """Kafka applies an ACL change when a broker replays the metadata log, a moment after the answer, and
    each node of a cluster replays it on its own: the change is waited for on every node, since a cell's
    request may go to any of them."""
    for node in admin.every_node():
        for binding in bindings:
            wait_for(lambda n=node, b=binding: (acl_count(n, b) > 0) == present, what=f"ACL applied: {binding}")


def first_broker_id(admin: Connections) -> int:
    """The node id of the first broker (where the cluster cells' requests go): a broker describes its own
    configs."""
    brokers = admin.first.request(3, 12, {"topics": [], "allow_auto_topic_creation": False})["brokers"]
    (node,) = (b["node_id"] for b in brokers if f"{b['host']}:{b['port']}" == admin.addresses[0])
    return node


Probe = Callable[[Connections, Cell], int]


def probe_topic(user: Connections, cell: Cell) -> int:
    topic, op = cell.resource, cell.operation
    # Fetch, Produce, ListOffsets and DeleteRecords go to the partition's leader; the rest to any broker.
    wire = user.leader(topic) if op in (READ, WRITE, DESCRIBE, DELETE) else user.first
    if op == READ:
        r = wire.request(1, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1024, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1024}]}],
        })  # fmt: skip
        return r["error_code"] or r["responses"][0]["partitions"][0]["error_code"]
    if op == WRITE:
        records = build_batch([SimpleRecord(None, b"v")])
        r = wire.request(0, 9, {"acks": 1, "timeout_ms": 10000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})  # fmt: skip
        return r["responses"][0]["partition_responses"][0]["error_code"]
    if op == DESCRIBE:
        r = wire.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})  # fmt: skip
        return r["topics"][0]["partitions"][0]["error_code"]
    if op == DELETE:
        r = wire.request(21, 2, {"timeout_ms": 10000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "offset": 0}]}]})  # fmt: skip
        return r["topics"][0]["partitions"][0]["error_code"]
    if op == ALTER:
        r = wire.request(37, 3, {"topics": [{"name": topic, "count": 2, "assignments": None}],
                                 "timeout_ms": 10000, "validate_only": True})  # fmt: skip
        return r["results"][0]["error_code"]
    if op == DESCRIBE_CONFIGS:
        r = wire.request(32, 4, {"resources": [{"resource_type": TOPIC, "resource_name": topic,
                                                "configuration_keys": ["retention.ms"]}],
                                 "include_synonyms": False, "include_documentation": False})  # fmt: skip
        return r["results"][0]["error_code"]
    if op == ALTER_CONFIGS:
        r = wire.request(44, 1, {"validate_only": True, "resources": [{
            "resource_type": TOPIC, "resource_name": topic,
            "configs": [{"name": "retention.ms", "config_operation": 0, "value": "86400000"}]}]})  # fmt: skip
        return r["responses"][0]["error_code"]
    raise AssertionError(op)


def probe_group(user: Connections, cell: Cell) -> int:
    group, op = cell.resource, cell.operation
    wire = user.coordinator(group, 0)
    if op == READ:
        r = wire.request(11, 5, {
            "group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"}],
        })  # fmt: skip
        return r["error_code"]
    if op == DESCRIBE:
        r = wire.request(15, 5, {"groups": [group], "include_authorized_operations": False})
        return r["groups"][0]["error_code"]
    if op == DELETE:
        r = wire.request(42, 2, {"groups_names": [group]})
        return r["results"][0]["error_code"]
    raise AssertionError(op)


def probe_transactional_id(user: Connections, cell: Cell) -> int:
    if cell.operation == WRITE:  # InitProducerId, to the transaction coordinator
        r = user.coordinator(cell.resource, 1).request(22, 4, {"transactional_id": cell.resource, "transaction_timeout_ms": 60000,
                                 "producer_id": -1, "producer_epoch": -1})  # fmt: skip
        return r["error_code"]
    r = user.first.request(10, 4, {"key_type": 1, "coordinator_keys": [cell.resource]})
    return r["coordinators"][0]["error_code"]


def probe_cluster(user: Connections, cell: Cell, node_id: int) -> int:
    wire = user.first
    if cell.operation == DESCRIBE:
        r = wire.request(29, 3, {
            "resource_type_filter": TOPIC, "resource_name_filter": "no-such-acl", "pattern_type_filter": LITERAL,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})  # fmt: skip
        return r["error_code"]
    if cell.operation == ALTER:
        r = wire.request(31, 3, {"filters": [{
            "resource_type_filter": TOPIC, "resource_name_filter": "no-such-acl", "pattern_type_filter": LITERAL,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]})  # fmt: skip
        return r["filter_results"][0]["error_code"]
    r = wire.request(32, 4, {"resources": [{"resource_type": CLUSTER, "resource_name": str(node_id),
                                            "configuration_keys": ["log.retention.hours"]}],
                             "include_synonyms": False, "include_documentation": False})  # fmt: skip
    return r["results"][0]["error_code"]


# Error codes of an allowed request: NONE, or what the request answers on its own merits.
ALLOWED_CODES = {
    (GROUP, READ): {0, 79},  # MEMBER_ID_REQUIRED: a JoinGroup v4+ without a member id
    (GROUP, DELETE): {69},  # GROUP_ID_NOT_FOUND: the group never existed
}


def decision(cell: Cell, code: int) -> str:
    if code == REFUSED[cell.resource_type]:
        return "refused"
    if code in ALLOWED_CODES.get((cell.resource_type, cell.operation), {0}):
        return "allowed"
    return f"error {code}"


def describe(cell: Cell) -> str:
    return f"resource type {cell.resource_type} operation {cell.operation}: {cell.label}"


def check(cells: list[Cell], observed: dict[int, str]) -> None:
    wrong = [
        f"{describe(c)}: expected {'allowed' if expected(c) else 'refused'}, got {observed[i]}"
        for i, c in enumerate(cells)
        if observed[i] != ("allowed" if expected(c) else "refused")
    ]
    assert not wrong, f"{len(wrong)} of {len(cells)} cells differ:\n" + "\n".join(wrong)


@pytest.fixture(scope="module")
def wires(request: pytest.FixtureRequest) -> Iterator[tuple[Connections, Connections]]:
    broker = request.getfixturevalue("sasl_acl_broker")
    admin = Connections(broker["sasl"], "admin")
    alice = Connections(broker["sasl"], "alice", finder=admin)
    try:
        yield admin, alice
    finally:
        admin.close()
        alice.close()


def run_batch(admin: Connections, alice: Connections, cells: list[Cell], probe: Probe) -> dict[int, str]:
    """Every cell's ACLs at once (each cell has resources of its own), then every cell's request."""
    bindings = [b for c in cells for b in c.bindings]
    create_acls(admin, bindings)
    wait_until_applied(admin, bindings, present=True)
    return {i: decision(c, probe(alice, c)) for i, c in enumerate(cells)}


def run_isolated(admin: Connections, alice: Connections, cells: list[Cell], probe: Probe) -> dict[int, str]:
    """One cell at a time (its ACLs apply to every resource of the type): create, probe, delete."""
    observed = {}
    for i, cell in enumerate(cells):
        create_acls(admin, cell.bindings)
        wait_until_applied(admin, cell.bindings, present=True)
        # Kafka's authorizer applies the replayed ACLs a moment after DescribeAcls shows them.
        deadline = time.monotonic() + 10
        while True:
            observed[i] = decision(cell, probe(alice, cell))
            if observed[i] == ("allowed" if expected(cell) else "refused") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        delete_acls(admin, cell.bindings)
        wait_until_applied(admin, cell.bindings, present=False)
    return observed


def create_topics(admin: Connections, names: list[str]) -> None:
    r = admin.first.request(19, 5, {"timeout_ms": 60000, "validate_only": False, "topics": [
        {"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []} for n in names]})  # fmt: skip
    assert not [t for t in r["topics"] if t["error_code"]], r
    for n in names:
        wait_for(
            lambda n=n: probe_topic(admin, Cell(TOPIC, DESCRIBE, "", (), n)) == 0, what=f"topic {n} ready"
        )


def test_acl_decision_matrix_topics(wires: tuple[Connections, Connections]) -> None:
    admin, alice = wires
    cells = make_cells(TOPIC, uuid.uuid4().hex[:6])
    create_topics(admin, [c.resource for c in cells])
    check(cells, run_batch(admin, alice, cells, probe_topic))


def test_acl_decision_matrix_groups(wires: tuple[Connections, Connections]) -> None:
    admin, alice = wires
    # The group coordinator is up (__consumer_offsets created and loaded) before the cells run.
    warm_up = Cell(GROUP, READ, "", (), f"m{uuid.uuid4().hex[:6]}-warm-up")
    find = {"key_type": 0, "coordinator_keys": [warm_up.resource]}  # creates __consumer_offsets on Kafka
    wait_for(lambda: admin.first.request(10, 4, find)["coordinators"][0]["error_code"] == 0, what="FindCoordinator")
    wait_for(lambda: probe_group(admin, warm_up) == 79, what="group coordinator")
    cells = make_cells(GROUP, uuid.uuid4().hex[:6])
    check(cells, run_batch(admin, alice, cells, probe_group))


def test_acl_decision_matrix_transactional_ids(wires: tuple[Connections, Connections]) -> None:
    admin, alice = wires
    # The transaction coordinator is up (__transaction_state created and loaded) before the cells run.
    warm_up = f"m{uuid.uuid4().hex[:6]}-warm-up"
    for operation in (DESCRIBE, WRITE):
        cell = Cell(TRANSACTIONAL_ID, operation, "", (), warm_up)
        wait_for(lambda c=cell: probe_transactional_id(admin, c) == 0, what="transaction coordinator")
    cells = make_cells(TRANSACTIONAL_ID, uuid.uuid4().hex[:6])
    check(cells, run_batch(admin, alice, cells, probe_transactional_id))


def test_acl_decision_matrix_cluster(wires: tuple[Connections, Connections]) -> None:
    admin, alice = wires
    node_id = first_broker_id(admin)
    cells = make_cells(CLUSTER, uuid.uuid4().hex[:6])
    check(cells, run_isolated(admin, alice, cells, lambda w, c: probe_cluster(w, c, node_id)))


def test_acl_decision_matrix_wildcard_resources(wires: tuple[Connections, Connections]) -> None:
    """LITERAL ``*`` applies to every resource of its type: ALLOW and DENY through it, one at a time."""
    admin, alice = wires
    run = uuid.uuid4().hex[:6]
    topic = f"m{run}-wild"
    create_topics(admin, [topic])
    sets: list[tuple[str, tuple[Acl, ...]]] = [
        ("ALLOW READ on *", (Acl(ALICE, READ, name="*"),)),
        ("ALLOW ALL on * + DENY READ on the topic", (Acl(ALICE, ALL, name="*"), Acl(ALICE, READ, DENY))),
        ("ALLOW READ on the topic + DENY READ on *", (Acl(ALICE, READ), Acl(ALICE, READ, DENY, name="*"))),
        ("ALLOW WRITE on * (implies DESCRIBE, not READ)", (Acl(ALICE, WRITE, name="*"),)),
        ("ALLOW READ on * to another principal", (Acl(BOB, READ, name="*"),)),
    ]
    cells = []
    for label, acls in sets:
        cell = Cell(TOPIC, READ, label, acls, topic)
        cell.bindings = [
            {"resource_type": TOPIC, "resource_name": a.name or topic, "resource_pattern_type": a.pattern,
             "principal": a.principal, "host": a.host, "operation": a.operation, "permission_type": a.permission}
            for a in acls
        ]  # fmt: skip
        cells.append(cell)
    check(cells, run_isolated(admin, alice, cells, probe_topic))


def test_the_model_is_not_trivial() -> None:
    """Both answers occur in every (resource type, operation) of the matrix: a broker that allowed or
    refused everything would fail it."""
    for rtype in (TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER):
        by_op: dict[int, set[bool]] = {}
        for cell in make_cells(rtype, "x"):
            by_op.setdefault(cell.operation, set()).add(expected(cell))
        assert all(v == {True, False} for v in by_op.values()), (rtype, by_op)


CLUSTER_ACTION = 9
SHARE_STATE_REQUESTS = {  # api key -> (version, partition data besides "partition")
    83: (0, {"state_epoch": 0, "start_offset": 0}),
    84: (0, {"leader_epoch": -1}),
    85: (1, {"state_epoch": 0, "leader_epoch": -1, "start_offset": 0, "state_batches": []}),
    86: (0, {}),
    87: (1, {"leader_epoch": -1}),
}


def share_state_codes(wire: WireClient, group: str, topic_id: uuid.UUID) -> dict[int, tuple[int, str | None]]:
    """(error code, message) of each share coordinator RPC (KIP-932) for partition 0 of ``topic_id``."""
    out = {}
    for api_key, (version, fields) in SHARE_STATE_REQUESTS.items():
        body = {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0, **fields}]}]}
        (partition,) = wire.request(api_key, version, body)["results"][0]["partitions"]
        out[api_key] = (partition["error_code"], partition["error_message"])
    return out


def test_share_state_apis_and_share_coordinator_lookup_need_cluster_action(wires: tuple[Connections, Connections]) -> None:
    """Only brokers' persisters send the share-state RPCs and look share coordinators up: Kafka asks
    CLUSTER_ACTION on the cluster for all five and for FindCoordinator key type 2."""
    admin, alice = wires
    topic = f"m{uuid.uuid4().hex[:6]}-share"
    create_topics(admin, [topic])
    topic_id = admin.first.request(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})["topics"][0]["topic_id"]
    group = f"m{uuid.uuid4().hex[:6]}"
    key = f"{group}:{base64.urlsafe_b64encode(topic_id.bytes).rstrip(b'=').decode()}:0"
    find = {"key_type": 2, "coordinator_keys": [key]}
    refused = (REFUSED[CLUSTER], "Cluster authorization failed.")
    # Refused before anything else is looked at, by any broker: asked of the first (before the share
    # coordinator, or __share_group_state, exists).
    assert alice.first.request(10, 6, find)["coordinators"][0]["error_code"] == REFUSED[CLUSTER]
    assert share_state_codes(alice.first, group, topic_id) == dict.fromkeys(SHARE_STATE_REQUESTS, refused)
    # The super user finds the coordinator (which makes __share_group_state) and initializes the state
    # there (on a cluster another node answers NOT_COORDINATOR).
    wait_for(lambda: admin.first.request(10, 6, find)["coordinators"][0]["error_code"] == 0, what="share coordinator")
    wait_for(lambda: share_state_codes(admin.coordinator(key, 2), group, topic_id)[83][0] == 0, what="share state initialized")
    binding = {"resource_type": CLUSTER, "resource_name": CLUSTER_NAME, "resource_pattern_type": LITERAL,
               "principal": ALICE, "host": "*", "operation": CLUSTER_ACTION, "permission_type": ALLOW}  # fmt: skip
    create_acls(admin, [binding])
    try:
        wait_until_applied(admin, [binding], present=True)
        wait_for(lambda: alice.first.request(10, 6, find)["coordinators"][0]["error_code"] == 0, what="CLUSTER_ACTION applied")
        assert {k: code for k, (code, _) in share_state_codes(alice.coordinator(key, 2), group, topic_id).items()} == dict.fromkeys(
            SHARE_STATE_REQUESTS, 0
        )
    finally:
        delete_acls(admin, [binding])
        wait_until_applied(admin, [binding], present=False)


def test_update_features_and_alter_replica_log_dirs_need_alter_on_the_cluster(
    wires: tuple[Connections, Connections],
) -> None:
    """UpdateFeatures and AlterReplicaLogDirs: refused (CLUSTER_AUTHORIZATION_FAILED, for every partition of
    the latter) without ALTER on the cluster, answered on their merits with it."""
    admin, alice = wires
    upgrade = {"timeout_ms": 30000, "validate_only": True,
               "feature_updates": [{"feature": "transaction.version", "max_version_level": 2, "upgrade_type": 1}]}  # fmt: skip
    move = {"dirs": [{"path": "/no/such/dir", "topics": [{"name": "any-topic", "partitions": [0, 1]}]}]}

    def codes() -> tuple[int, list[int]]:
        features = alice.first.request(57, 1, upgrade)
        moved = alice.first.request(34, 2, move)
        return features["error_code"], [p["error_code"] for t in moved["results"] for p in t["partitions"]]

    assert codes() == (REFUSED[CLUSTER], [REFUSED[CLUSTER]] * 2)
    binding = {"resource_type": CLUSTER, "resource_name": CLUSTER_NAME, "resource_pattern_type": LITERAL,
               "principal": ALICE, "host": "*", "operation": ALTER, "permission_type": ALLOW}  # fmt: skip
    create_acls(admin, [binding])
    try:
        wait_until_applied(admin, [binding], present=True)
        # LOG_DIR_NOT_FOUND: the path is checked once the request may be made.
        wait_for(lambda: codes() == (0, [57, 57]), what="ALTER on the cluster applied")
    finally:
        delete_acls(admin, [binding])
        wait_until_applied(admin, [binding], present=False)
