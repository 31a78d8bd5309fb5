"""vllm-gammatune-tools: the benchmark and demo harness (``gammatune_tools``).

Kept out of the plugin's wheel: vLLM never loads it, and the plugin never
imports it. ``python -m benchmarks.X`` and ``examples/demo.py`` need both
installed (``bash scripts/run.sh install`` does that).
"""

from setuptools import find_packages, setup

setup(
    name="vllm-gammatune-tools",
    version="0.1.0",
    description=(
        "Benchmark and demo harness of vllm-gammatune: engines, servers, records, "
        "statistics and the draft/target model pair's preparation"
    ),
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["gammatune_tools", "gammatune_tools.*"]),
    install_requires=["vllm-gammatune", "tqdm"],
    extras_require={"plots": ["matplotlib"]},
)
