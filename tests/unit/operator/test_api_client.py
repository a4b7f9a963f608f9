"""The operator's API client keeps one pooled connection per thread that calls the API server."""

from __future__ import annotations

from pathlib import Path

import yaml

from batchmark.operator.controller.kube import api_client
from batchmark.operator.controller.workers import API_CONNECTIONS, CREATOR_THREADS, KOPF_THREADS, REFRESH_THREADS


def write_kubeconfig(path: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "admin", "user": {"token": "not-a-real-token"}}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
                "current-context": "local",
            }
        ),
        encoding="utf-8",
    )
    return path


def test_the_pool_holds_a_connection_for_every_thread_of_the_operator(tmp_path: Path) -> None:
    assert API_CONNECTIONS >= KOPF_THREADS + REFRESH_THREADS + CREATOR_THREADS
    client = api_client(str(write_kubeconfig(tmp_path / "kubeconfig")), API_CONNECTIONS)
    assert client.configuration.host == "https://127.0.0.1:6443"
    assert client.configuration.connection_pool_maxsize == API_CONNECTIONS
    assert client.rest_client.pool_manager.connection_pool_kw["maxsize"] == API_CONNECTIONS


def test_without_a_size_the_client_keeps_its_default_pool(tmp_path: Path) -> None:
    client = api_client(str(write_kubeconfig(tmp_path / "kubeconfig")))
    assert client.configuration.connection_pool_maxsize >= 1
    assert client.rest_client.pool_manager.connection_pool_kw["maxsize"] == client.configuration.connection_pool_maxsize
