"""The arguments of a partition's share-group calls as they arrive through Ray, untyped (from the Kafka listener or
the Python share consumer): each check raises `InvalidRequestError` for what the listener never sends, before the
call touches a share-partition."""

from __future__ import annotations

from actors.core.shares.acknowledgements import AcknowledgementBatch
from actors.core.shares.group_share_config import ResolvedShareConfig
from storage.arguments import is_int
from storage.errors import InvalidRequestError


def check_share_member(group_id: object, member_id: object) -> None:
    """A share call's group and member ids."""
    if not isinstance(group_id, str) or not isinstance(member_id, str):
        raise InvalidRequestError("a share group call needs a group id and a member id")


def check_share_group(group_id: object) -> None:
    """A share-group offset call's group id."""
    if not isinstance(group_id, str) or not group_id:
        raise InvalidRequestError("a share-group offset call needs a group id")


def check_share_settings(config: object) -> None:
    """A share call's group settings."""
    if not isinstance(config, ResolvedShareConfig):
        raise InvalidRequestError(f"expected a share group's settings, not {type(config).__name__}")


def check_share_fetch_limit(max_records: object, record_limit: object) -> None:
    """A share fetch's record limit: a positive count, and whether it is a hard limit (the record-limit acquire
    mode)."""
    if not is_int(max_records) or max_records < 1:
        raise InvalidRequestError(f"max_records must be a positive int, not {max_records!r}")
    if not isinstance(record_limit, bool):
        raise InvalidRequestError(f"record_limit must be a bool, not {type(record_limit).__name__}")


def check_share_acknowledgements(batches: object, renew: object) -> None:
    """A share call's acknowledgement batches, and whether RENEW may be among them."""
    if not isinstance(batches, list) or not all(isinstance(batch, AcknowledgementBatch) for batch in batches):
        raise InvalidRequestError("share acknowledgements must be a list of AcknowledgementBatch")
    if not isinstance(renew, bool):
        raise InvalidRequestError(f"renew must be a bool, not {type(renew).__name__}")
