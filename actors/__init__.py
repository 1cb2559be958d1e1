"""raybroker's broker on Ray: the client facades users hold, and the broker's lifecycle.

`Broker.connect()` finds the running broker; `Admin` manages topics, `Producer` and `Consumer` write and
read records without any `.remote()` or `ray.get`, and raise the project's typed errors
(`storage.errors`), never Ray's. `serializers` turns keys and values into bytes and back. The actors
themselves live in `actors.server` (`partition_log`, `partition_host`, `log_manager`, `controller`,
`group_coordinator`), the client facades in `actors.clients`. The names here are imported on first use, so an
actor's process does not import the client facades (`storage.lazy_exports` says why).
"""

from typing import TYPE_CHECKING

from storage.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from actors.clients import serializers
    from actors.clients.admin import Admin, PartitionDescription, TopicDescription
    from actors.clients.broker import Broker, start_broker, stop_broker
    from actors.clients.consumer import Consumer, ConsumerRecord
    from actors.clients.producer import ConsumerGroupMetadata, Producer, RecordMetadata, SendManyFuture

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "serializers": "actors.clients.serializers",
        **dict.fromkeys(("Admin", "PartitionDescription", "TopicDescription"), "actors.clients.admin"),
        **dict.fromkeys(("Broker", "start_broker", "stop_broker"), "actors.clients.broker"),
        **dict.fromkeys(("Consumer", "ConsumerRecord"), "actors.clients.consumer"),
        **dict.fromkeys(
            ("ConsumerGroupMetadata", "Producer", "RecordMetadata", "SendManyFuture"), "actors.clients.producer"
        ),
    },
)

__all__ = [
    "Admin",
    "Broker",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "PartitionDescription",
    "Producer",
    "RecordMetadata",
    "SendManyFuture",
    "TopicDescription",
    "serializers",
    "start_broker",
    "stop_broker",
]
