"""ElectLeaders (43): leader elections an operator asks for, what `kafka-leader-election.sh` and the Admin client's
`electLeaders` send.

v0 elects preferred leaders; v1+ names the election type: PREFERRED (0) or UNCLEAN (1). The controller decides each
partition (`actors.core.controller.elections`): NONE when it elected a leader, ELECTION_NOT_NEEDED (84) when the
preferred replica already leads (or, unclean, when a live leader exists), PREFERRED_LEADER_NOT_AVAILABLE (80),
ELIGIBLE_LEADERS_NOT_AVAILABLE (83), UNKNOWN_TOPIC_OR_PARTITION (3, with Kafka's message naming the topic or the
partition). A null partition list asks for every partition of the cluster and is answered with the partitions where
an election was needed, as Kafka's controller answers.
Elections are applied before the answer: the request's `timeout` is not waited on.

Authorization, as Kafka's: ALTER on the cluster, else the request answers CLUSTER_AUTHORIZATION_FAILED (31) at the
top (v1+) and for every partition named.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.controller.elections import ElectionError, ElectionType
from actors.core.security.acl_bindings import AclOperation
from cluster.protocol.error_codes import election_error_code, error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows_cluster
from cluster.protocol.messages import build
from cluster.protocol.views.broker_view import BrokerView
from storage.errors import RaybrokerError

ELECT_LEADERS_KEY = 43
FIRST_TYPED_VERSION = 1


class ElectLeadersHandler(GuardedHandler[BrokerView]):
    """Answers ElectLeaders (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        named = (
            None
            if body.topic_partitions is None
            else [(topic.topic, partition) for topic in body.topic_partitions for partition in topic.partitions]
        )
        if not allows_cluster(self._access, request.context, AclOperation.ALTER):
            denied = ErrorCode.cluster_authorization_failed
            return self._response(request, denied, {tp: (denied, None) for tp in named or ()})
        election_type = (
            ElectionType(body.election_type) if request.api_version >= FIRST_TYPED_VERSION else ElectionType.PREFERRED
        )
        try:
            outcomes = await self._view.elect_leaders(election_type, named)
            known = (
                set(await self._view.topics())
                if ElectionError.UNKNOWN_TOPIC_OR_PARTITION in outcomes.values()
                else set()
            )
        except RaybrokerError as exc:
            failed = error_code(exc)
            return self._response(request, failed, {tp: (failed, None) for tp in named or ()})
        answers = {tp: (election_error_code(outcome), _message(tp, outcome, known)) for tp, outcome in outcomes.items()}
        return self._response(request, ErrorCode.none, answers)

    @staticmethod
    def _response(
        request: Request, code: ErrorCode, answers: dict[tuple[str, int], tuple[ErrorCode, str | None]]
    ) -> Any:
        """The answer: the top-level `code` (v1+) and each partition's code and message, grouped by topic."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), (partition_code, message) in answers.items():
            topics.setdefault(topic, []).append(
                {"partition_id": partition, "error_code": partition_code, "error_message": message}
            )
        values: dict[str, Any] = {
            "throttle_time": 0,
            "replica_election_results": [
                {"topic": topic, "partition_result": results} for topic, results in topics.items()
            ],
        }
        if request.api_version >= FIRST_TYPED_VERSION:
            values["error_code"] = code
        return build(response_schema(ELECT_LEADERS_KEY, request.api_version), values)


def _message(partition: tuple[str, int], outcome: ElectionError, known_topics: set[str]) -> str | None:
    """Kafka's controller's message for an unknown topic or partition (its tool prints it); None for the others,
    whose exceptions carry their default text on the client, as Kafka's do."""
    if outcome != ElectionError.UNKNOWN_TOPIC_OR_PARTITION:
        return None
    topic, number = partition
    return f"No such partition as {topic}-{number}" if topic in known_topics else f"No such topic as {topic}"
