"""One partition log: appends and their validation, loading and recovery, producer state, retention, reads."""
