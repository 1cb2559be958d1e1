"""raybroker's benchmarks: `python -m benchmarks [--quick] [--json PATH] [--only NAME ...]`.

Each figure is measured beside its baseline in the same run and reported as a ratio (see `common.py`).
"""
