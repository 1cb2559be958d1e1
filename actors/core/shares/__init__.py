"""Share groups (KIP-932, Kafka's queues), Ray-free: each share-partition's in-flight records and their durable
state, a share group's membership and assignment, and their settings."""
