"""A broker's log dirs: dir-level state, the log manager over them, its partition handles and scheduler."""
