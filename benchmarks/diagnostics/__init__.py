"""Diagnostics no published number needs: ``python -m benchmarks.diagnostics.X``."""
