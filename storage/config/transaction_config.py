"""The transaction coordinator's broker settings, under Kafka's names and with Kafka's defaults (Kafka's
`TransactionLogConfigs` and `TransactionStateManagerConfigs`).

| Kafka name                                                 | type  | default   | meaning                            |
|------------------------------------------------------------|-------|-----------|------------------------------------|
| transaction.state.log.num.partitions                       | int   | 50        | partitions of __transaction_state  |
| transaction.state.log.replication.factor                   | short | 3         | its replicas (capped at brokers)   |
| transaction.state.log.min.isr                              | int   | 2         | its min.insync.replicas (capped)   |
| transaction.state.log.segment.bytes                        | int   | 104857600 | its segment.bytes                  |
| transaction.max.timeout.ms                                 | int   | 900000    | longest transaction.timeout.ms     |
| transactional.id.expiration.ms                             | int   | 604800000 | idle transactional ids forgotten   |
| transaction.abort.timed.out.transaction.cleanup.interval.ms | int  | 10000     | period of the timed-out abort scan |
| transaction.remove.expired.transaction.cleanup.interval.ms | int   | 3600000   | period of the id expiry scan       |

`TransactionKeys` declares them once; `BrokerConfig` extends it and derives its `transaction_config`.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.config.config_values import check_fields, config_field


@dataclass(frozen=True)
class TransactionKeys:
    """The transaction coordinator's broker keys, each declared here only."""

    transaction_state_log_num_partitions: int = config_field(50, "int", low=1)
    transaction_state_log_replication_factor: int = config_field(3, "int", low=1, high=32767)
    transaction_state_log_min_isr: int = config_field(2, "int", low=1)
    transaction_state_log_segment_bytes: int = config_field(104857600, "int", low=1)
    transaction_max_timeout_ms: int = config_field(900000, "int", low=1)
    transactional_id_expiration_ms: int = config_field(604800000, "int", low=1)
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = config_field(10000, "int", low=1)
    transaction_remove_expired_transaction_cleanup_interval_ms: int = config_field(3600000, "int", low=1)


@dataclass(frozen=True)
class TransactionConfig(TransactionKeys):
    """The transaction coordinator's settings (see the module docstring for names and defaults)."""

    def __post_init__(self) -> None:
        check_fields(self)
