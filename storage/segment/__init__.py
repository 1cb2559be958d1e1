"""One segment of a log (`.log` with its `.index` and `.timeindex`), and the ordered set of them."""
