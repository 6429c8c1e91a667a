"""Benchmarks of the exactly-once sinks against the writers users would otherwise use.

Run ``python -m bench <sink> [options]`` from the project root; ``python -m bench --help``
lists the sinks. Results go to ``bench/results/<sink>.json``.
"""
