"""raybroker's storage layer: Apache Kafka's on-disk partition log, in pure Python (no Ray, no Spark).

The public surface is re-exported here; everything else is reachable through its module.
"""

from storage.clock import Clock, MockClock, SystemClock
from storage.compression import CompressionType
from storage.config import LogConfig
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
from storage.log import Log, LogAppendInfo
from storage.log_manager import LogManager
from storage.log_segment import FetchDataInfo
from storage.record_batch import Record, RecordBatch, RecordBatchBuilder, TimestampType

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
