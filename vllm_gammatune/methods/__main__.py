"""``python -m vllm_gammatune.methods``: the methods table of ``docs/methods.md``."""

from vllm_gammatune.methods.registry import markdown_table

print(markdown_table(), end="")
