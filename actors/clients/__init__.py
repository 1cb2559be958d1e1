"""The client facades users hold (`Broker`, `Admin`, `Producer`, `Consumer`): no `.remote()`, typed errors."""
