"""raybroker's storage layer: Apache Kafka's on-disk partition log, in pure Python (no Ray, no Spark).

The public surface is re-exported here, each name imported on first use (`storage.lazy_exports` says why);
everything else is reachable through its module.
"""

from typing import TYPE_CHECKING

from storage.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from storage.clock import Clock, MockClock, SystemClock
    from storage.config.log_config import LogConfig
    from storage.errors import (
        CorruptRecordError,
        InvalidConfigError,
        InvalidRecordError,
        InvalidTimestampError,
        InvalidTopicError,
        KafkaStorageError,
        OffsetOutOfRangeError,
        PolicyViolationError,
        RaybrokerError,
        RecordBatchTooLargeError,
        RecordTooLargeError,
        StorageError,
    )
    from storage.logdir.log_manager import LogManager
    from storage.partition.log import Log, LogAppendInfo
    from storage.records.compression import CompressionType
    from storage.records.record_batch import Record, RecordBatch, RecordBatchBuilder, TimestampType
    from storage.segment.log_segment import FetchDataInfo

_ERRORS = (
    "CorruptRecordError",
    "InvalidConfigError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "PolicyViolationError",
    "RaybrokerError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "StorageError",
)

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(("Clock", "MockClock", "SystemClock"), "storage.clock"),
        "LogConfig": "storage.config.log_config",
        **dict.fromkeys(_ERRORS, "storage.errors"),
        "LogManager": "storage.logdir.log_manager",
        **dict.fromkeys(("Log", "LogAppendInfo"), "storage.partition.log"),
        "CompressionType": "storage.records.compression",
        **dict.fromkeys(
            ("Record", "RecordBatch", "RecordBatchBuilder", "TimestampType"), "storage.records.record_batch"
        ),
        "FetchDataInfo": "storage.segment.log_segment",
    },
)

__all__ = [
    "Clock",
    "CompressionType",
    "CorruptRecordError",
    "FetchDataInfo",
    "InvalidConfigError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "KafkaStorageError",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogManager",
    "MockClock",
    "OffsetOutOfRangeError",
    "PolicyViolationError",
    "RaybrokerError",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "StorageError",
    "SystemClock",
    "TimestampType",
]
