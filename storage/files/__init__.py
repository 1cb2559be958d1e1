"""Small files of a log dir and of a partition folder, one module per format (its docstring is the spec): the
text checkpoints, `meta.properties`, the `.kafka_cleanshutdown` marker and the `.lock` file. Below the partition
log and the log manager alike: both read and write them."""
