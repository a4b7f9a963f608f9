#!/usr/bin/env bash
# checkov (the chart's manifest scanner, tests/integration/chart) in a venv of its own, .venv-checkov: it pins
# ~100 packages of its own (boto3, packaging 23, ...) that must not shape the project's .venv. Idempotent;
# ~5 min the first time on 2 cores, seconds afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
CHECKOV_VERSION=3.3.30
if [ -x .venv-checkov/bin/checkov ] && .venv-checkov/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('checkov') != '$CHECKOV_VERSION')" 2>/dev/null; then
    echo "checkov: $CHECKOV_VERSION already installed"
    exit 0
fi
[ -x .venv-checkov/bin/python ] || "$PYTHON" -m venv .venv-checkov
export PIP_FIND_LINKS= PIP_NO_INPUT=1
.venv-checkov/bin/python -m pip install --quiet --upgrade pip
.venv-checkov/bin/python -m pip install --quiet "checkov==$CHECKOV_VERSION"
echo "checkov: installed $CHECKOV_VERSION"
