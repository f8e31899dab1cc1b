"""Benchmarks of the orchestrator runtime beside a raw trio loop and a peer runtime.

Run ``python -m bench`` from the repository root (``--quick`` for a smoke run).
"""
