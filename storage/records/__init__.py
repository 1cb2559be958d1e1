"""Kafka's record formats: v2 record batches, legacy message sets, codecs, and a `.log` file of batches."""
