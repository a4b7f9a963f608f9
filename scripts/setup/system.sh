#!/usr/bin/env bash
# System packages the observability tests run for real: Prometheus (with promtool), the Pushgateway, and
# headless Chromium. Idempotent: does nothing when all three are installed.
set -euo pipefail

missing=()
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v prometheus-pushgateway >/dev/null 2>&1 || missing+=(prometheus-pushgateway)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ "${#missing[@]}" -eq 0 ]; then
    echo "system packages: already installed"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

# The Debian packages start their daemons from postinst (through invoke-rc.d, with or without systemd). The
# tests start their own instances on 127.0.0.1 and stop them, so a system-wide instance must never start:
# policy-rc.d answering 101 ("action forbidden") is Debian's documented way to say so. An existing policy
# (container images ship one) is left as it is.
policy=/usr/sbin/policy-rc.d
created_policy=""
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# batchmark scripts/setup/system.sh: no daemons during this install\nexit 101\n' \
        | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    created_policy=1
fi
cleanup() {
    if [ -n "$created_policy" ]; then
        $SUDO rm -f "$policy"
    fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

# With systemd as init, units may still be enabled for the next boot: disable them so that a machine that
# runs the tests never serves Prometheus on 0.0.0.0 behind their back.
if [ -d /run/systemd/system ]; then
    for unit in prometheus prometheus-pushgateway prometheus-node-exporter; do
        $SUDO systemctl disable --now "$unit" >/dev/null 2>&1 || true
    done
fi
echo "system packages: installed ${missing[*]}"
