"""The transaction coordinator (Kafka's exactly-once write side) as plain classes: `coordinator` (the state
machine, producer ids and epochs, markers, timeouts, persisted in `__transaction_state`), `transaction_metadata`
(one id's state and its allowed transitions) and `state_topic` (the internal topic)."""
