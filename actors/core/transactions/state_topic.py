"""`__transaction_state`, the internal topic of the transaction coordinator's states, which it creates itself.

`ensure_transaction_state_topic` creates it with `transaction.state.log.num.partitions` partitions,
`transaction.state.log.replication.factor` replicas (capped at the brokers running, with a warning, as
`__consumer_offsets` is) and the topic configs Kafka's coordinator forces on it: compacted (only each id's latest
state matters), uncompressed, `min.insync.replicas` = `transaction.state.log.min.isr` (capped at the replicas, so a
one-broker cluster can append), `segment.bytes` = `transaction.state.log.segment.bytes`, no unclean election.
An existing topic is left as it is.
"""

from __future__ import annotations

from actors.core.controller.topic_metadata import TRANSACTION_STATE_TOPIC, TopicMetadata
from actors.core.internal_topics import TopicAdmin, ensure_internal_topic
from storage.config.transaction_config import TransactionConfig


def ensure_transaction_state_topic(controller: TopicAdmin, config: TransactionConfig) -> TopicMetadata:
    replicas = max(min(config.transaction_state_log_replication_factor, len(controller.brokers())), 1)
    topic_config = {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "min.insync.replicas": str(min(config.transaction_state_log_min_isr, replicas)),
        "segment.bytes": str(config.transaction_state_log_segment_bytes),
        "unclean.leader.election.enable": "false",
    }
    return ensure_internal_topic(
        controller,
        TRANSACTION_STATE_TOPIC,
        config.transaction_state_log_num_partitions,
        config.transaction_state_log_replication_factor,
        topic_config,
        "transaction.state.log.replication.factor",
    )
