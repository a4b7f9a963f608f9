#!/usr/bin/env bash
# The project's virtual environment (.venv) with batchmark and its test tools; idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# pip settings of the machine this runs on (find-links folders, caps) must not shape the install.
export PIP_FIND_LINKS= PIP_NO_INPUT=1
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'
