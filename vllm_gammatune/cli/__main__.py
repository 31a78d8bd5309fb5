"""``python -m vllm_gammatune.cli``: the ``vllm-gammatune`` command."""

from vllm_gammatune.cli.main import main

main()
