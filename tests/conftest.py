"""Fixtures shared by every test folder: the local Kubernetes control plane (tests/cluster/)."""

pytest_plugins = ["tests.cluster.fixtures"]
