"""The benchmark commands, run from the repository root as ``python -m benchmarks.X``
(``benchmarks/README.md``); the harness they use is ``gammatune_tools.bench``."""
