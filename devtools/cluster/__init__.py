"""A real local Kubernetes control plane, with fake GPU nodes, for tests and the demo."""
