"""The name of one partition: `(topic, partition)`, as Kafka's `TopicPartition`.

A plain tuple rather than a class: it is a dict key and a checkpoint entry everywhere, sorts as Kafka sorts
partitions in checkpoint files (by topic, then number), and crosses Ray's pickling for free.
"""

TopicPartition = tuple[str, int]
