"""What every bulk reader of topics shares, whatever engine it feeds (the Spark bridge, Ray Data's source): the one
read planner, offset ranges and the partition handles that read them, Kafka batches decoded into Arrow, record
values decoded into columns, and where each isolation level ends a read. Neither Spark nor Ray Data is imported
here, so the two paths give the same rows by construction."""
