#!/usr/bin/env bash
# One-time set-up for the local control plane: etcd from Debian's etcd-server package, runc and iptables (the
# `containers` runtime's: containerd runs containers with runc, and the API server's address for pods is a
# DNAT rule), the certificates Kueue's metrics and visibility servers read from fixed paths, then the
# Kubernetes binaries, the kubelet, containerd, the CNI plugins, helm, Kueue and JobSet (see cluster-binaries.sh).
# Safe to run again: what is there already is kept.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v etcd >/dev/null 2>&1; then
    sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    # Tests start their own etcd; the package's system service must not start one on the default ports.
    # policy-rc.d tells the package scripts not to start services; it is removed again unless it was there.
    added_policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
        $sudo chmod +x /usr/sbin/policy-rc.d
        added_policy=1
    fi
    $sudo apt-get update
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends etcd-server
    [[ -z "$added_policy" ]] || $sudo rm -f /usr/sbin/policy-rc.d
    if [[ -d /run/systemd/system ]]; then
        $sudo systemctl disable --now etcd.service || true
    fi
fi
# runc from Debian: containerd's shim runs every container of the `containers` runtime with it.
missing=()
for binary in runc iptables; do
    command -v "$binary" >/dev/null 2>&1 || missing+=("$binary")
done
if [[ "${#missing[@]}" -gt 0 ]]; then
    sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    $sudo apt-get update
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends runc iptables
fi

# sed, not head: head exits after one line and, under pipefail, etcd's SIGPIPE (141) would fail the set-up.
etcd --version | sed -n 1p

# Kueue run without its internal certificate management reads its metrics server's certificate from this
# fixed path (no flag moves it). Written once rather than per test run, so that runs sharing the machine never
# remove it from under each other's Kueue. Self-signed, for a server on 127.0.0.1.
kueue_metrics_certs=/etc/kueue/metrics/certs
if [[ ! -f "$kueue_metrics_certs/tls.crt" || ! -f "$kueue_metrics_certs/tls.key" ]]; then
    sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    $sudo mkdir -p "$kueue_metrics_certs"
    $sudo openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
        -subj /CN=kueue-metrics-local -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
        -keyout "$kueue_metrics_certs/tls.key" -out "$kueue_metrics_certs/tls.crt" 2>/dev/null
    # Readable by whoever runs the tests, as the certificate volume of Kueue's pod would be.
    $sudo chmod 0644 "$kueue_metrics_certs/tls.key" "$kueue_metrics_certs/tls.crt"
fi

# Likewise its visibility server (queue positions, an aggregated API) reads its certificate from the fixed
# folder /visibility. The API server reaches it as the APIService's Service, kueue-visibility-server in
# kueue-system, so the name it verifies is kueue-visibility-server.kueue-system.svc; self-signed, the
# certificate is its own CA (the APIService's caBundle).
kueue_visibility_certs=/visibility
if [[ ! -f "$kueue_visibility_certs/tls.crt" || ! -f "$kueue_visibility_certs/tls.key" ]]; then
    sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    $sudo mkdir -p "$kueue_visibility_certs"
    $sudo openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
        -subj /CN=kueue-visibility-local \
        -addext subjectAltName=DNS:kueue-visibility-server.kueue-system.svc,DNS:localhost,IP:127.0.0.1 \
        -keyout "$kueue_visibility_certs/tls.key" -out "$kueue_visibility_certs/tls.crt" 2>/dev/null
    $sudo chmod 0644 "$kueue_visibility_certs/tls.key" "$kueue_visibility_certs/tls.crt"
fi

"$here/cluster-binaries.sh"
