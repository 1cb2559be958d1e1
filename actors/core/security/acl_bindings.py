"""Kafka's ACL vocabulary: resource and pattern types, operations, permissions, bindings and binding filters.

The enum values are Kafka's wire codes (CreateAcls, DescribeAcls, DeleteAcls carry them as int8). A binding is
one access-control entry on one resource pattern, as `AclBinding` in Kafka's clients:

| field             | values                                                                    |
|-------------------|---------------------------------------------------------------------------|
| `resource_type`   | TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID                                   |
| `resource_name`   | a name, `*` (every resource of the type; LITERAL only), `kafka-cluster`   |
| `pattern_type`    | LITERAL (the name, or `*`), PREFIXED (every name that starts with it)    |
| `principal`       | `Type:name`, e.g. `User:alice`; `User:*` is every user                    |
| `host`            | a client IP address, or `*`                                               |
| `operation`       | READ, WRITE, ... or ALL                                                   |
| `permission_type` | ALLOW or DENY                                                             |

A binding is checked when it is built (`AclBinding(...)` raises `InvalidAclError`) against what Kafka's
CreateAcls refuses. A filter (`AclBindingFilter`) selects bindings for DescribeAcls and DeleteAcls: None and ANY
match anything, and the pattern type MATCH selects every binding that would apply to the named resource.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar, Self

from storage.errors import InvalidRequestError

# Kafka's name of the one CLUSTER resource.
CLUSTER_NAME = "kafka-cluster"
# A LITERAL binding on this name applies to every resource of its type; a principal or host of `*` to any.
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class InvalidAclError(InvalidRequestError):
    """An ACL binding, filter or enum name that Kafka refuses (INVALID_REQUEST on CreateAcls and DeleteAcls)."""


class _AclEnum(enum.IntEnum):
    """An enum of Kafka's ACL vocabulary: wire codes, and the names Kafka's tools accept."""

    @classmethod
    def parse(cls, text: str) -> Self:
        """The member named `text` as kafka-acls.sh spells it (`DescribeConfigs`), or as the enum (`DESCRIBE_CONFIGS`),
        case-insensitively, `-` or `_` between words or nothing; UNKNOWN is never a valid name."""
        wanted = text.strip().replace("-", "").replace("_", "").lower() if isinstance(text, str) else None
        for member in cls:
            if member.name != "UNKNOWN" and member.name.replace("_", "").lower() == wanted:
                return member
        names = ", ".join(member.pascal_name for member in cls if member.name != "UNKNOWN")
        raise InvalidAclError(f"unknown {cls.__name__} {text!r}; expected one of {names}")

    @classmethod
    def from_code(cls, code: int) -> Self:
        """The member of wire code `code`, UNKNOWN for a code this broker does not know (as Kafka's `fromCode`)."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)

    @property
    def pascal_name(self) -> str:
        """Kafka's tool spelling: `DescribeConfigs`."""
        return "".join(word.capitalize() for word in self.name.split("_"))


class ResourceType(_AclEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(_AclEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_AclEnum):
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


class AclPermissionType(_AclEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The operations that mean something on each resource type (ALL aside), as kafka-acls.sh checks them.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset(
        {
            AclOperation.READ,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        }
    ),
    ResourceType.CLUSTER: frozenset(
        {
            AclOperation.CREATE,
            AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
}


def check_principal(principal: object) -> str:
    """`principal` if it is `Type:name` with neither part empty, else `InvalidAclError`."""
    if isinstance(principal, str):
        kind, colon, name = principal.partition(":")
        if colon and kind and name:
            return principal
    raise InvalidAclError(f"principal must be Type:name (e.g. User:alice), got {principal!r}")


def _check_member(value: object, kind: type[_AclEnum], field: str, refused: tuple[str, ...]) -> None:
    if not isinstance(value, kind):
        raise InvalidAclError(f"{field} must be a {kind.__name__}, got {value!r}")
    if value.name in refused:
        raise InvalidAclError(f"invalid {field} {value.name}")


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One access-control entry on one resource pattern (see the module docstring); checked when built."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        _check_member(self.resource_type, ResourceType, "resource type", ("UNKNOWN", "ANY"))
        _check_member(self.pattern_type, PatternType, "pattern type", ("UNKNOWN", "ANY", "MATCH"))
        _check_member(self.operation, AclOperation, "operation", ("UNKNOWN", "ANY"))
        _check_member(self.permission_type, AclPermissionType, "permission type", ("UNKNOWN", "ANY"))
        if not isinstance(self.resource_name, str) or not self.resource_name:
            raise InvalidAclError(f"resource name must be a non-empty string, got {self.resource_name!r}")
        if self.resource_type is ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidAclError(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        check_principal(self.principal)
        if not isinstance(self.host, str) or not self.host:
            raise InvalidAclError(f"host must be an address or *, got {self.host!r}")

    def to_filter(self) -> AclBindingFilter:
        """The filter that matches exactly this binding."""
        return AclBindingFilter(
            self.resource_type,
            self.resource_name,
            self.pattern_type,
            self.principal,
            self.host,
            self.operation,
            self.permission_type,
        )

    def pattern_text(self) -> str:
        """Kafka's `ResourcePattern.toString()`, which kafka-acls.sh prints."""
        return pattern_text(self.resource_type, self.resource_name, self.pattern_type)

    def entry_text(self) -> str:
        """Kafka's `AccessControlEntry.toString()`, which kafka-acls.sh prints."""
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )


def from_codes(
    resource_type: int,
    resource_name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission_type: int,
) -> tuple[ResourceType, str | None, PatternType, str | None, str | None, AclOperation, AclPermissionType]:
    """A binding's or a filter's fields, in their order, from Kafka's wire codes (CreateAcls creations, DescribeAcls
    and DeleteAcls filters); `InvalidAclError` for a code Kafka does not define."""
    return (
        ResourceType.from_code(resource_type),
        resource_name,
        PatternType.from_code(pattern_type),
        principal,
        host,
        AclOperation.from_code(operation),
        AclPermissionType.from_code(permission_type),
    )


def pattern_text(resource_type: ResourceType, resource_name: str | None, pattern_type: PatternType) -> str:
    """`ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`, as Kafka prints a pattern."""
    name = "<any>" if resource_name is None else resource_name
    return f"ResourcePattern(resourceType={resource_type.name}, name={name}, patternType={pattern_type.name})"


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects bindings, as Kafka's `AclBindingFilter`: None names, principals and hosts and ANY enums match
    anything; pattern type MATCH matches the LITERAL binding of the name, the LITERAL `*`, and every PREFIXED
    binding whose name starts the filter's name. UNKNOWN values are refused (`InvalidAclError`)."""

    ANY: ClassVar[AclBindingFilter]

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        _check_member(self.resource_type, ResourceType, "resource type", ("UNKNOWN",))
        _check_member(self.pattern_type, PatternType, "pattern type", ("UNKNOWN",))
        _check_member(self.operation, AclOperation, "operation", ("UNKNOWN",))
        _check_member(self.permission_type, AclPermissionType, "permission type", ("UNKNOWN",))
        for field, value in (("resource name", self.resource_name), ("host", self.host)):
            if value is not None and not isinstance(value, str):
                raise InvalidAclError(f"{field} must be a string or None, got {value!r}")
        if self.principal is not None:
            check_principal(self.principal)

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding) and self._matches_entry(binding)

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not binding.resource_type:
            return False
        exact_or_any = self.pattern_type in (PatternType.ANY, binding.pattern_type)
        if not exact_or_any and self.pattern_type is not PatternType.MATCH:
            return False
        if self.resource_name is None:
            return True
        if exact_or_any:
            return self.resource_name == binding.resource_name
        if binding.pattern_type is PatternType.LITERAL:
            return binding.resource_name in (self.resource_name, WILDCARD)
        return self.resource_name.startswith(binding.resource_name)

    def _matches_entry(self, binding: AclBinding) -> bool:
        return (
            (self.principal is None or self.principal == binding.principal)
            and (self.host is None or self.host == binding.host)
            and self.operation in (AclOperation.ANY, binding.operation)
            and self.permission_type in (AclPermissionType.ANY, binding.permission_type)
        )

    def pattern_text(self) -> str:
        """Kafka's `ResourcePatternFilter.toString()` shape, with `<any>` for a None name."""
        return pattern_text(self.resource_type, self.resource_name, self.pattern_type)


AclBindingFilter.ANY = AclBindingFilter(
    ResourceType.ANY, None, PatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
)
