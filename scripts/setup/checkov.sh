#!/usr/bin/env bash
# checkov (the chart's manifest scanner, tests/integration/chart) in a venv of its own, .venv-checkov: it pins
# ~100 packages of its own (boto3, packaging 23, ...) that must not shape the project's .venv. Idempotent.
# Nothing of the project goes into that venv, so it is made once per machine, in ~/.cache/batchmark/venvs
# (BATCHMARK_VENVS_CACHE moves it), and .venv-checkov links to it: ~1 min the first time on 2 cores (pip's cache
# filled), a second afterwards, in a fresh clone too.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
CHECKOV_VERSION=3.3.30

has_checkov() { # venv-dir
    [ -x "$1/bin/checkov" ] && "$1/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('checkov') != '$CHECKOV_VERSION')" 2>/dev/null
}

# A venv made here before the cache existed is kept while it has the right version.
if has_checkov .venv-checkov; then
    echo "checkov: $CHECKOV_VERSION already installed"
    exit 0
fi

cache="${BATCHMARK_VENVS_CACHE:-$HOME/.cache/batchmark/venvs}"
python_version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
shared="$cache/checkov-$CHECKOV_VERSION-py$python_version"
mkdir -p "$cache"
# One install at a time per machine: two clones set up at once must not write the same venv together.
exec 9>"$shared.lock"
flock 9
# The stamp is written last, so an interrupted install is never taken for a finished one.
if ! { [ -f "$shared/.batchmark-complete" ] && has_checkov "$shared"; }; then
    rm -rf "$shared"
    "$PYTHON" -m venv "$shared"
    export PIP_FIND_LINKS= PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1
    "$shared/bin/python" -m pip install --quiet --upgrade pip
    "$shared/bin/python" -m pip install --quiet "checkov==$CHECKOV_VERSION"
    touch "$shared/.batchmark-complete"
    echo "checkov: installed $CHECKOV_VERSION in $shared"
fi
flock -u 9
rm -rf .venv-checkov
ln -s "$shared" .venv-checkov
echo "checkov: .venv-checkov -> $shared"
