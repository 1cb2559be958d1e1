"""raybroker's storage layer: Apache Kafka's on-disk partition log, in pure Python (no Ray, no Spark).

The public surface is re-exported here; everything else is reachable through its module.
"""

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
