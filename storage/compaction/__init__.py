"""Log compaction: the offset map, the cleaner's algorithm, and the cleaning state of every log."""
