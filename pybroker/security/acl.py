"""Kafka's ACL vocabulary: resource types, pattern types, operations, permission types (with Kafka's
wire codes), ACL bindings and the filters DescribeAcls/DeleteAcls match them with.

Names and codes are those of org.apache.kafka.common.{acl,resource}; matching follows
ResourcePatternFilter.matches and AccessControlEntryFilter.matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

WILDCARD_RESOURCE = "*"  # a LITERAL ACL on "*" matches every resource of its type
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
ANONYMOUS = "User:ANONYMOUS"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_Code = TypeVar("_Code", bound=IntEnum)


def _from_code(enum: type[_Code], code: int) -> _Code:
    """Kafka's fromCode: a code it does not know is UNKNOWN."""
    try:
        return enum(code)
    except ValueError:
        return enum(0)


def resource_type(code: int) -> ResourceType:
    return _from_code(ResourceType, code)


def pattern_type(code: int) -> PatternType:
    return _from_code(PatternType, code)


def operation(code: int) -> AclOperation:
    return _from_code(AclOperation, code)


def permission_type(code: int) -> AclPermissionType:
    return _from_code(AclPermissionType, code)


# Kafka's AclEntry.supportedOperations: the operations the authorized-operations bitfields report.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding / StandardAcl)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def to_json(self) -> dict:
        return {
            "resource_type": self.resource_type.name,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permission_type": self.permission_type.name,
        }

    @classmethod
    def from_json(cls, d: dict) -> AclBinding:
        return cls(
            ResourceType[d["resource_type"]],
            d["resource_name"],
            PatternType[d["pattern_type"]],
            d["principal"],
            d["host"],
            AclOperation[d["operation"]],
            AclPermissionType[d["permission_type"]],
        )


class InvalidAcl(ValueError):
    """An ACL Kafka's controller refuses to create (answered INVALID_REQUEST)."""


def validate_new_acl(acl: AclBinding) -> None:
    """Kafka's checks of a CreateAcls entry: AclApis (the CLUSTER name, an empty name) and then
    AclControlManager.validateNewAcl (concrete types only)."""
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not acl.resource_name:
        raise InvalidAcl("Invalid empty resource name")
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAcl(f"Invalid resourceType {acl.resource_type.name}")
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"Invalid patternType {acl.pattern_type.name}")
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAcl(f"Invalid operation {acl.operation.name}")
    if acl.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAcl(f"Invalid permissionType {acl.permission_type.name}")
    if ":" not in acl.principal:
        raise InvalidAcl(
            f"Could not parse principal from `{acl.principal}` (no colon is present separating the principal "
            "type from the principal name)"
        )


def is_concrete(acl: AclBinding) -> bool:
    """False when Kafka cannot even build the binding (its ResourcePattern and AccessControlEntry refuse
    ANY, and MATCH): its CreateAcls then fails as a whole, every entry UNKNOWN_SERVER_ERROR."""
    return (
        acl.resource_type != ResourceType.ANY
        and acl.pattern_type not in (PatternType.ANY, PatternType.MATCH)
        and acl.operation != AclOperation.ANY
        and acl.permission_type != AclPermissionType.ANY
    )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls/DeleteAcls filter: None names, principals and hosts match anything."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def is_unknown(self) -> bool:
        return (
            self.resource_type == ResourceType.UNKNOWN
            or self.pattern_type == PatternType.UNKNOWN
            or self.operation == AclOperation.UNKNOWN
            or self.permission_type == AclPermissionType.UNKNOWN
        )

    def matches(self, acl: AclBinding) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != acl.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if pt == PatternType.ANY or pt == acl.pattern_type:
            return name == acl.resource_name
        # MATCH: the ACLs that would apply to a resource of that name.
        if acl.pattern_type == PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD_RESOURCE
        return name.startswith(acl.resource_name)

    def _matches_entry(self, acl: AclBinding) -> bool:
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type
