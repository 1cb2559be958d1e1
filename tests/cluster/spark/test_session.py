"""`cluster.spark.session` without starting Spark: the session's settings and the typed errors rebuilt from Spark's
error text."""

from __future__ import annotations

from cluster.spark.session import JDK17_JAVA_OPTIONS, QUIET_LOG4J_PATH, session_configs, typed_spark_error
from storage.errors import OffsetOutOfRangeError


def test_every_jvm_gets_the_jdk17_opens_and_the_quiet_log_configuration() -> None:
    configs = session_configs(executor_cores=2, num_executors=1, extra={"spark.sql.shuffle.partitions": "8"})
    for key in (
        "spark.driver.extraJavaOptions",
        "spark.executor.extraJavaOptions",
        "spark.ray.raydp_app_master.extraJavaOptions",
    ):
        assert configs[key] == JDK17_JAVA_OPTIONS
    assert "--add-opens=java.base/java.lang=ALL-UNNAMED" in JDK17_JAVA_OPTIONS
    assert "--add-opens=java.base/java.math=ALL-UNNAMED" in JDK17_JAVA_OPTIONS
    assert configs["spark.log4j.config.file.name"] == str(QUIET_LOG4J_PATH) and QUIET_LOG4J_PATH.is_file()
    assert configs["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert configs["spark.sql.shuffle.partitions"] == "8"
    assert session_configs(executor_cores=3, num_executors=2)["spark.sql.shuffle.partitions"] == "6"


def test_a_read_tasks_typed_error_is_rebuilt_from_the_python_exception_text() -> None:
    text = (
        "An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "Traceback (most recent call last):\n"
        '  File "/work/main/cluster/spark/reading.py", line 120, in _skip_deleted_records\n'
        "storage.errors.OffsetOutOfRangeError: t-0: offsets 10 to 39 were deleted. Set failOnDataLoss=false\n"
    )
    error = typed_spark_error(RuntimeError(text))
    assert isinstance(error, OffsetOutOfRangeError)
    assert error.message == "t-0: offsets 10 to 39 were deleted. Set failOnDataLoss=false"
    assert typed_spark_error(RuntimeError("storage.errors.NoSuchError: x")) is None
    assert typed_spark_error(RuntimeError("ValueError: boom")) is None
