"""The BatchBenchmark resource: ``api`` (its models), ``schema`` and ``crd`` (the CRD generated from them)."""
