"""Configuration under Kafka's names and defaults: topic (`LogConfig`), broker, cleaner, and the value types."""
