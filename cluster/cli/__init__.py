"""The `raybroker` command line, modelled on Apache Kafka's command-line tools."""
