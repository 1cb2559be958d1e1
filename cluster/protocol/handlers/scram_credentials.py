"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51): the users' SCRAM credentials, as
Kafka's `kafka-configs.sh --entity-type users` and Admin clients manage them.

Mechanisms are Kafka's wire codes (SCRAM-SHA-256 is 1, SCRAM-SHA-512 is 2). Nothing secret is ever answered:
DescribeUserScramCredentials lists, per user, each mechanism it has a credential for with its iteration count.
AlterUserScramCredentials carries what the client computed from the password (salt, SaltedPassword, iterations;
never the password), from which the controller keeps StoredKey and ServerKey
(`ScramCredential.from_salted_password`).

Describe needs DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED (31) for the whole answer and each user
named; no users (null or empty) lists every user with a credential; a named user without any answers
RESOURCE_NOT_FOUND (91), one named twice DUPLICATE_RESOURCE (92), once.

Alter needs ALTER on the cluster, else every user named answers CLUSTER_AUTHORIZATION_FAILED. It follows Kafka's
controller (`ScramControlManager`): deletions are checked first, then upsertions; a user named twice in one request
(whatever the mechanisms) answers DUPLICATE_RESOURCE and none of its changes is made; an empty user name or
an iteration count outside 4096..16384 (or an empty salt or SaltedPassword) answers UNACCEPTABLE_CREDENTIAL (93),
an unknown mechanism UNSUPPORTED_SASL_MECHANISM (33), deleting a credential that does not exist
RESOURCE_NOT_FOUND. One result per user: deletions made, then upsertions made, then refusals.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation
from actors.core.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ResourceNotFoundError,
    ScramCredential,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from cluster.protocol.error_codes import ClusterAuthorizationFailedError, DuplicateResourceError, error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows_cluster
from cluster.protocol.messages import build
from cluster.protocol.views.security_view import SecurityView
from storage.errors import RaybrokerError

DESCRIBE_USER_SCRAM_CREDENTIALS_KEY = 50
ALTER_USER_SCRAM_CREDENTIALS_KEY = 51
MECHANISM_NAMES = {code: name for name, code in SCRAM_MECHANISMS.items()}
TWICE = "A user credential cannot be altered twice in the same request"


def _failed(user: str, exc: RaybrokerError) -> dict[str, Any]:
    return {"user": user, "error_code": error_code(exc), "error_message": exc.message}


class DescribeUserScramCredentialsHandler(GuardedHandler[SecurityView]):
    """Answers DescribeUserScramCredentials (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        response_type = response_schema(DESCRIBE_USER_SCRAM_CREDENTIALS_KEY, request.api_version)
        named = [user.name for user in request.body.users or ()]
        try:
            if not allows_cluster(self._access, request.context, AclOperation.DESCRIBE):
                raise ClusterAuthorizationFailedError("not authorized to DESCRIBE the cluster")
            credentials = await self._view.scram_credentials()
        except RaybrokerError as exc:
            failed = {"error_code": error_code(exc), "error_message": exc.message}
            results = [{"user": "", **failed, "credential_infos": []} for _ in named]
            return build(response_type, {"throttle_time": 0, **failed, "results": results})
        counts: dict[str, int] = {}
        for user in named or credentials:
            counts[user] = counts.get(user, 0) + 1
        return build(
            response_type,
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "error_message": None,
                "results": [_described(user, count, credentials.get(user)) for user, count in counts.items()],
            },
        )


def _described(user: str, count: int, by_mechanism: dict[str, ScramCredential] | None) -> dict[str, Any]:
    refusal: RaybrokerError | None = None
    if count > 1:
        refusal = DuplicateResourceError(
            f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
        )
    elif not by_mechanism:
        refusal = ResourceNotFoundError(f"Attempt to describe a user credential that does not exist: {user}")
    if refusal is not None:
        return {**_failed(user, refusal), "credential_infos": []}
    assert by_mechanism is not None, "a user described has credentials"
    return {
        "user": user,
        "error_code": ErrorCode.none,
        "error_message": None,
        "credential_infos": [
            {"mechanism": SCRAM_MECHANISMS[mechanism], "iterations": credential.iterations}
            for mechanism, credential in sorted(by_mechanism.items(), key=lambda item: SCRAM_MECHANISMS[item[0]])
        ],
    }


class AlterUserScramCredentialsHandler(GuardedHandler[SecurityView]):
    """Answers AlterUserScramCredentials (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        response_type = response_schema(ALTER_USER_SCRAM_CREDENTIALS_KEY, request.api_version)
        body = request.body
        if not allows_cluster(self._access, request.context, AclOperation.ALTER):
            refusal = ClusterAuthorizationFailedError("not authorized to ALTER the cluster")
            users = sorted({change.name for change in (*body.deletions, *body.upsertions)})
            return build(response_type, {"throttle_time": 0, "results": [_failed(user, refusal) for user in users]})
        try:
            existing = await self._view.scram_credentials()
        except RaybrokerError as exc:
            users = sorted({change.name for change in (*body.deletions, *body.upsertions)})
            return build(response_type, {"throttle_time": 0, "results": [_failed(user, exc) for user in users]})
        refused: dict[str, RaybrokerError] = {}
        deletions: dict[str, str] = {}
        upsertions: dict[str, ScramCredential] = {}
        for deletion in body.deletions:
            if deletion.name in refused:
                continue
            if deletion.name in deletions:
                del deletions[deletion.name]
                refused[deletion.name] = DuplicateResourceError(TWICE)
                continue
            try:
                mechanism = _mechanism(deletion.name, deletion.mechanism)
                if mechanism not in existing.get(deletion.name, {}):
                    raise ResourceNotFoundError("Attempt to delete a user credential that does not exist")
            except RaybrokerError as exc:
                refused[deletion.name] = exc
            else:
                deletions[deletion.name] = mechanism
        for upsertion in body.upsertions:
            if upsertion.name in refused:
                continue
            if upsertion.name in deletions or upsertion.name in upsertions:
                deletions.pop(upsertion.name, None)
                upsertions.pop(upsertion.name, None)
                refused[upsertion.name] = DuplicateResourceError(TWICE)
                continue
            try:
                upsertions[upsertion.name] = _credential(upsertion)
            except RaybrokerError as exc:
                refused[upsertion.name] = exc
        # Deletions first, then upsertions, each user's change answered by the controller on its own.
        delete, upsert = self._view.delete_scram_credential, self._view.upsert_scram_credential
        changes: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            *((user, partial(delete, user, mechanism)) for user, mechanism in deletions.items()),
            *((user, partial(upsert, user, credential)) for user, credential in upsertions.items()),
        ]
        results = []
        for user, change in changes:
            try:
                await change()
            except RaybrokerError as exc:
                refused[user] = exc
            else:
                results.append({"user": user, "error_code": ErrorCode.none, "error_message": None})
        results.extend(_failed(user, exc) for user, exc in refused.items())
        return build(response_type, {"throttle_time": 0, "results": results})


def _mechanism(user: str, code: int) -> str:
    """The mechanism name of a wire code, after Kafka's check of the user name."""
    if not user:
        raise UnacceptableCredentialError("Username must not be empty")
    mechanism = MECHANISM_NAMES.get(code)
    if mechanism is None:
        raise UnsupportedSaslMechanismError("Unknown SCRAM mechanism")
    return mechanism


def _credential(upsertion: Any) -> ScramCredential:
    """The credential an upsertion carries; the typed error Kafka answers for one it refuses."""
    mechanism = _mechanism(upsertion.name, upsertion.mechanism)
    if upsertion.iterations < MIN_ITERATIONS:
        raise UnacceptableCredentialError("Too few iterations")
    if upsertion.iterations > MAX_ITERATIONS:
        raise UnacceptableCredentialError("Too many iterations")
    if not upsertion.salt or not upsertion.salted_password:
        raise UnacceptableCredentialError("salt and salted password must not be empty")
    return ScramCredential.from_salted_password(
        mechanism, bytes(upsertion.salt), bytes(upsertion.salted_password), upsertion.iterations
    )
