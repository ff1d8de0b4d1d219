"""The authorizer's decisions, case by case after Kafka's StandardAuthorizerTest / AuthorizerTest:
LITERAL, wildcard and PREFIXED matching, DENY winning, hosts, implied operations, super users,
allow.everyone.if.no.acl.found, authorizeByResourceType, the filters of DescribeAcls/DeleteAcls, and
the decision cache following ACL changes.  (Through real clients: compat_tests/scenarios/test_acls.py.)"""

from __future__ import annotations

import pytest

from pybroker.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from pybroker.security.authorizer import Authorizer, parse_super_users

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
Op = AclOperation
ALICE, BOB = "User:alice", "User:bob"
HOST = "192.168.0.1"


def acl(name, op=Op.READ, perm=ALLOW, principal=ALICE, pattern=LITERAL, rtype=TOPIC, host="*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: AclBinding, super_users: str = "", allow_if_no_acl: bool = False) -> Authorizer:
    a = Authorizer(parse_super_users(super_users), allow_if_no_acl)
    assert a.create_acls(acls) == [None] * len(acls)
    return a


def allowed(a: Authorizer, name: str, op=Op.READ, principal=ALICE, rtype=TOPIC, host=HOST) -> bool:
    return a.authorize(principal, host, op, rtype, name, log_denied=False)


def test_literal_wildcard_and_prefixed_patterns() -> None:
    a = authorizer(acl("foo"), acl("*", op=Op.WRITE), acl("pre", op=Op.DELETE, pattern=PREFIXED))
    assert allowed(a, "foo") and not allowed(a, "foobar")  # LITERAL: that name only
    assert allowed(a, "anything", Op.WRITE) and allowed(a, "foo", Op.WRITE)  # LITERAL "*": every topic
    assert allowed(a, "prefix", Op.DELETE) and allowed(a, "pre", Op.DELETE) and not allowed(a, "pr", Op.DELETE)
    assert not allowed(a, "foo", Op.READ, rtype=GROUP)  # other resource types are untouched


def test_deny_wins_whatever_the_pattern() -> None:
    a = authorizer(acl("*", op=Op.ALL), acl("sec", op=Op.READ, perm=DENY, pattern=PREFIXED))
    assert allowed(a, "public") and not allowed(a, "secret") and allowed(a, "secret", Op.WRITE)
    b = authorizer(acl("t", op=Op.ALL), acl("*", op=Op.READ, perm=DENY, principal="User:*"))
    assert not allowed(b, "t") and allowed(b, "t", Op.WRITE)


def test_implied_operations_come_from_allow_acls_only() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed(authorizer(acl("t", op=op)), "t", Op.DESCRIBE)
    assert not allowed(authorizer(acl("t", op=Op.CREATE)), "t", Op.DESCRIBE)
    assert allowed(authorizer(acl("t", op=Op.ALTER_CONFIGS)), "t", Op.DESCRIBE_CONFIGS)
    assert not allowed(authorizer(acl("t", op=Op.DESCRIBE_CONFIGS)), "t", Op.ALTER_CONFIGS)
    # A DENY of Read does not deny Describe.
    assert allowed(authorizer(acl("t", op=Op.ALL), acl("t", op=Op.READ, perm=DENY)), "t", Op.DESCRIBE)
    # DENY ALL denies everything.
    assert not allowed(authorizer(acl("t", op=Op.ALL), acl("t", op=Op.ALL, perm=DENY)), "t", Op.DESCRIBE)


def test_principals_and_hosts() -> None:
    a = authorizer(acl("t", principal="User:*"), acl("t", op=Op.WRITE, host=HOST))
    assert allowed(a, "t", principal=BOB)
    assert allowed(a, "t", Op.WRITE) and not allowed(a, "t", Op.WRITE, host="10.0.0.1")
    # Principal type matters: Group:alice is not User:alice.
    assert not allowed(authorizer(acl("t", op=Op.WRITE)), "t", Op.WRITE, principal="Group:alice")


def test_no_acl_found_and_some_acls_found() -> None:
    a = authorizer(acl("t", principal=BOB), allow_if_no_acl=True)
    assert allowed(a, "other")  # no ACL applies to "other": allow.everyone.if.no.acl.found
    assert not allowed(a, "t")  # ACLs apply to "t", none for alice: denied
    assert not allowed(authorizer(), "other")  # the default is deny
    # Prefixed ACLs of others count as "ACLs found" too.
    assert not allowed(authorizer(acl("o", principal=BOB, pattern=PREFIXED), allow_if_no_acl=True), "other")


def test_super_users_are_never_denied() -> None:
    a = authorizer(acl("t", op=Op.ALL, perm=DENY, principal="User:*"), super_users="User:admin; User:ops")
    assert allowed(a, "t", Op.WRITE, principal="User:admin") and allowed(a, "t", principal="User:ops")
    assert not allowed(a, "t", principal=ALICE)
    with pytest.raises(ValueError):
        parse_super_users("admin")


def test_authorize_by_resource_type() -> None:
    """Kafka's AuthorizerTest.testAuthorizeByResourceType* cases (InitProducerId of an idempotent producer)."""

    def by_type(*acls: AclBinding) -> bool:
        return authorizer(*acls).authorize_by_resource_type(ALICE, HOST, Op.WRITE, TOPIC)

    assert not by_type()
    assert by_type(acl("t", op=Op.WRITE))
    assert by_type(acl("t", op=Op.ALL))
    assert not by_type(acl("t", op=Op.WRITE), acl("t", op=Op.WRITE, perm=DENY))
    assert not by_type(acl("t", op=Op.WRITE), acl("t", op=Op.WRITE, perm=DENY, pattern=PREFIXED))
    assert by_type(acl("ta", op=Op.WRITE), acl("tb", op=Op.WRITE, perm=DENY, pattern=PREFIXED))
    assert not by_type(acl("t", op=Op.WRITE), acl("*", op=Op.WRITE, perm=DENY))
    assert by_type(acl("*", op=Op.WRITE))
    assert not by_type(acl("t", op=Op.READ))
    assert not by_type(acl("t", op=Op.WRITE, host="10.0.0.1"))


def test_authorized_operations_bitfield() -> None:
    a = authorizer(acl("t", op=Op.READ), acl("t", op=Op.ALTER_CONFIGS))
    bits = a.authorized_operations(ALICE, HOST, TOPIC, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.ALTER_CONFIGS) | (1 << Op.DESCRIBE_CONFIGS)


def test_filters_and_deletion() -> None:
    literal, prefixed, wildcard = acl("foo"), acl("fo", pattern=PREFIXED), acl("*", op=Op.WRITE, principal=BOB)
    a = authorizer(literal, prefixed, wildcard, acl("g", rtype=GROUP))

    def f(name, pattern, rtype=TOPIC, principal=None, op=Op.ANY, perm=AclPermissionType.ANY) -> AclBindingFilter:
        return AclBindingFilter(rtype, name, pattern, principal, None, op, perm)

    assert set(a.acls(f("foo", PatternType.MATCH))) == {literal, prefixed, wildcard}
    assert set(a.acls(f("foo", PatternType.ANY))) == {literal}
    assert set(a.acls(f(None, PREFIXED))) == {prefixed}
    assert set(a.acls(f(None, PatternType.ANY, principal=BOB))) == {wildcard}
    assert len(a.acls(f(None, PatternType.ANY, rtype=ResourceType.ANY))) == 4
    (deleted, unknown) = a.delete_acls(
        [f("foo", PatternType.MATCH, op=Op.READ), f(None, PatternType.ANY, rtype=ResourceType.UNKNOWN)]
    )
    assert set(deleted) == {literal, prefixed} and isinstance(unknown, ValueError)
    assert len(a) == 2


def test_decisions_follow_acl_changes() -> None:
    a = authorizer(allow_if_no_acl=True)
    assert allowed(a, "t")  # cached: allowed
    a.create_acls([acl("t", principal=BOB)])
    assert not allowed(a, "t")  # the cache was dropped with the change
    a.delete_acls([AclBindingFilter(TOPIC, "t", LITERAL, None, None, Op.ANY, AclPermissionType.ANY)])
    assert allowed(a, "t")


def test_create_acls_validation_and_duplicates() -> None:
    a = authorizer()
    results = a.create_acls(
        [
            acl("kafka-cluster", rtype=CLUSTER, op=Op.ALTER),
            acl("other", rtype=CLUSTER, op=Op.ALTER),
            acl(""),
            acl("t", principal="nocolon"),
            acl("t"),
            acl("t"),  # the same ACL twice: created once, both answered success
        ]
    )
    assert [type(r).__name__ if r else None for r in results] == [None, "InvalidAcl", "InvalidAcl", "InvalidAcl", None, None]
    assert len(a) == 2
