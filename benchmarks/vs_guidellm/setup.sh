#!/usr/bin/env bash
# GuideLLM 0.8.1 from PyPI into the vLLM venv, without changing what vLLM runs on: everything already installed
# is held at its version, except click (GuideLLM pins click~=8.4.0; vLLM's offline path does not use click).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup/vllm.sh
export PIP_FIND_LINKS= PIP_NO_INPUT=1 PIP_CONSTRAINT= PIP_DISABLE_PIP_VERSION_CHECK=1
PY=.venv-vllm/bin/python
if "$PY" -c 'import importlib.metadata as m; assert m.version("guidellm") == "0.8.1"' 2>/dev/null; then
  exit 0
fi
held=.venv-vllm/guidellm-constraints.txt
"$PY" -m pip freeze --exclude-editable | grep -v -i -E '^(click|batchmark)==' | grep -v '^-e ' > "$held"
"$PY" -m pip install --quiet -c "$held" guidellm==0.8.1
