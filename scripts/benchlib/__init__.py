"""Helpers of scripts/bench_peers.py: /proc readings, the systems under test, the two floors."""
