"""Ray Data over raybroker's topics, by the broker's own path: `read_topic` (a Dataset read where the partitions
lie), `stream_topic` (successive Datasets following the topics for a consumer group), `share_stream` (Datasets of
the records a share group's member acquires, acknowledged batch by batch) and `write_topic` (a Dataset's rows
appended as whole batches). See `docs/ray-data.md`."""

from cluster.data.datasink import TopicWriteResult, write_topic
from cluster.data.share_stream import ShareStream, share_stream
from cluster.data.streaming import StreamBatch, TopicStream, stream_topic
from cluster.data.topic_reads import read_topic

__all__ = [
    "ShareStream",
    "StreamBatch",
    "TopicStream",
    "TopicWriteResult",
    "read_topic",
    "share_stream",
    "stream_topic",
    "write_topic",
]
