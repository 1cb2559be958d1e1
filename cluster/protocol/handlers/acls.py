"""CreateAcls (key 30), DescribeAcls (key 29) and DeleteAcls (key 31): the cluster's ACL bindings, as Kafka's
`kafka-acls.sh` and Admin clients manage them.

The bindings live in the controller (`SecurityView`); after a change this listener reloads them at once
(`AccessControl.refresh`), and other listeners within their refresh interval. Wire fields are Kafka's codes
(`actors.core.security.acl_bindings` enums); a code this broker does not know is UNKNOWN, which is refused.

| API          | needs               | refused: CLUSTER_AUTHORIZATION_FAILED (31) | invalid: INVALID_REQUEST (42) |
|--------------|---------------------|--------------------------------------------|-------------------------------|
| CreateAcls   | ALTER on cluster    | for every creation                         | for that creation             |
| DescribeAcls | DESCRIBE on cluster | for the answer                             | for the answer                |
| DeleteAcls   | ALTER on cluster    | for every filter                           | for that filter               |

A broker without `authorizer.class.name` answers SECURITY_DISABLED (54) to all three, as Kafka's (it has no ACLs
to apply). Creating a binding that exists already succeeds and changes nothing. DescribeAcls answers one resource
per pattern with its bindings; DeleteAcls answers, per filter, every binding it deleted (a binding two filters
match is listed under both).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    InvalidAclError,
    PatternType,
    ResourceType,
    from_codes,
)
from cluster.protocol.error_codes import ClusterAuthorizationFailedError, SecurityDisabledError, error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import allows_cluster
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.security_view import SecurityView
from storage.errors import RaybrokerError

DESCRIBE_ACLS_KEY = 29
CREATE_ACLS_KEY = 30
DELETE_ACLS_KEY = 31

# Each field of a binding, in order, as a CreateAcls creation names it and as a DescribeAcls or DeleteAcls filter does.
_WIRE_FIELDS = (
    ("resource_type", "resource_type_filter"),
    ("resource_name", "resource_name_filter"),
    ("resource_pattern_type", "pattern_type_filter"),
    ("principal", "principal_filter"),
    ("host", "host_filter"),
    ("operation", "operation"),
    ("permission_type", "permission_type"),
)
_CREATION_FIELDS, _FILTER_FIELDS = zip(*_WIRE_FIELDS, strict=True)

_Parsed = TypeVar("_Parsed")
_Done = TypeVar("_Done")


def _refusal(access: AccessControl, request: Request, operation: AclOperation) -> RaybrokerError | None:
    """Why the request may not touch the ACLs: no authorizer, or no `operation` on the cluster; None if it may."""
    if not access.enabled:
        return SecurityDisabledError("no authorizer is configured on the broker (authorizer.class.name)")
    if not allows_cluster(access, request.context, operation):
        return ClusterAuthorizationFailedError(f"not authorized to {operation.name} the cluster")
    return None


async def _reload(access: AccessControl) -> None:
    """Applies a change on this listener at once; if the controller cannot be asked now, the listener's periodic
    refresh applies it later."""
    with contextlib.suppress(RaybrokerError):
        await access.refresh()


def _outcome(exc: RaybrokerError | None) -> dict[str, Any]:
    """An answer's error fields: `exc`'s code and message, or none."""
    if exc is None:
        return {"error_code": ErrorCode.none, "error_message": None}
    return {"error_code": error_code(exc), "error_message": exc.message}


class CreateAclsHandler:
    """Answers CreateAcls (see the module docstring)."""

    def __init__(self, security: SecurityView, access: AccessControl) -> None:
        self._security = security
        self._access = access

    async def __call__(self, request: Request) -> Any:
        outcomes = await _applied(self._access, request, request.body.creations, _binding, self._create)
        results = [_outcome(exc) for exc in outcomes]
        return build(response_schema(CREATE_ACLS_KEY, request.api_version), {"throttle_time": 0, "results": results})

    async def _create(self, bindings: list[AclBinding]) -> list[None]:
        """Creates the bindings; the controller answers nothing per binding."""
        await self._security.create_acls(bindings)
        return [None] * len(bindings)


class DescribeAclsHandler:
    """Answers DescribeAcls (see the module docstring)."""

    def __init__(self, security: SecurityView, access: AccessControl) -> None:
        self._security = security
        self._access = access

    async def __call__(self, request: Request) -> Any:
        response_type = response_schema(DESCRIBE_ACLS_KEY, request.api_version)
        try:
            matched = await self._matched(request)
        except RaybrokerError as exc:
            return build(response_type, {"throttle_time": 0, **_outcome(exc), "resources": []})
        patterns: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
        for binding in matched:
            pattern = (binding.resource_type, binding.resource_name, binding.pattern_type)
            patterns.setdefault(pattern, []).append(binding)
        resources = [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "pattern_type": pattern_type,
                "acls": [
                    {
                        "principal": binding.principal,
                        "host": binding.host,
                        "operation": binding.operation,
                        "permission_type": binding.permission_type,
                    }
                    for binding in bindings
                ],
            }
            for (resource_type, name, pattern_type), bindings in patterns.items()
        ]
        return build(
            response_type,
            {"throttle_time": 0, **_outcome(None), "resources": resources},
        )

    async def _matched(self, request: Request) -> list[AclBinding]:
        """The bindings the request's filter matches; the typed error of a refused or invalid request."""
        refusal = _refusal(self._access, request, AclOperation.DESCRIBE)
        if refusal is not None:
            raise refusal
        acl_filter = _filter(request.body)
        _, bindings = await self._security.acls()
        return [binding for binding in bindings if acl_filter.matches(binding)]


class DeleteAclsHandler:
    """Answers DeleteAcls (see the module docstring)."""

    def __init__(self, security: SecurityView, access: AccessControl) -> None:
        self._security = security
        self._access = access

    async def __call__(self, request: Request) -> Any:
        outcomes = await _applied(self._access, request, request.body.filters, _filter, self._security.delete_acls)
        results = [
            {**_outcome(outcome), "matching_acls": []}
            if isinstance(outcome, RaybrokerError)
            else {**_outcome(None), "matching_acls": [_matching(binding) for binding in outcome]}
            for outcome in outcomes
        ]
        response_type = response_schema(DELETE_ACLS_KEY, request.api_version)
        return build(response_type, {"throttle_time": 0, "filter_results": results})


async def _applied(
    access: AccessControl,
    request: Request,
    entries: Sequence[Any],
    parse: Callable[[Any], _Parsed],
    apply: Callable[[list[_Parsed]], Awaitable[list[_Done]]],
) -> list[RaybrokerError | _Done]:
    """What CreateAcls and DeleteAcls do with their entries: all refused together without ALTER on the cluster
    (`_refusal`); else each parsed (one Kafka refuses answers its `InvalidAclError`), the valid ones applied in one
    call to the controller, which answers per entry, and reloaded on this listener (`_reload`); a failed call is
    each valid entry's error. Per entry, in the request's order: its error or what the call answered."""
    refusal = _refusal(access, request, AclOperation.ALTER)
    if refusal is not None:
        return [refusal] * len(entries)
    parsed: list[RaybrokerError | _Parsed] = []
    for entry in entries:
        try:
            parsed.append(parse(entry))
        except InvalidAclError as exc:
            parsed.append(exc)
    valid = [item for item in parsed if not isinstance(item, RaybrokerError)]
    done: Iterator[_Done] = iter(())
    if valid:
        try:
            done = iter(await apply(valid))
        except RaybrokerError as exc:
            return [item if isinstance(item, RaybrokerError) else exc for item in parsed]
        await _reload(access)
    return [item if isinstance(item, RaybrokerError) else next(done) for item in parsed]


def _binding(creation: Any) -> AclBinding:
    """The binding a CreateAcls creation names; `InvalidAclError` for one Kafka refuses."""
    return AclBinding(*_coded(creation, _CREATION_FIELDS))


def _filter(wire: Any) -> AclBindingFilter:
    """The filter a DescribeAcls request or a DeleteAcls filter names; `InvalidAclError` for one Kafka refuses."""
    return AclBindingFilter(*_coded(wire, _FILTER_FIELDS))


def _coded(wire: Any, fields: tuple[str, ...]) -> tuple[Any, ...]:
    """The values of the wire's `fields` (`_WIRE_FIELDS`), its codes turned into the enums."""
    return from_codes(*(getattr(wire, field) for field in fields))


def _matching(binding: AclBinding) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "resource_type": binding.resource_type,
        "resource_name": binding.resource_name,
        "pattern_type": binding.pattern_type,
        "principal": binding.principal,
        "host": binding.host,
        "operation": binding.operation,
        "permission_type": binding.permission_type,
    }
