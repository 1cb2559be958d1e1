"""Kafka's client quotas: the controller's store of them (`client_quotas`: entities, validation, Describe's filters,
which quota applies) and the windowed rate that decides a throttle (`quota_rate`). Pure Python: the controller
persists the store in its metadata log, each Kafka listener enforces the quotas (`cluster.protocol.quota_enforcer`).
"""
