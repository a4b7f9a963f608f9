"""The BatchBenchmark resource: ``api`` (its models), ``status`` (the words of its status: phases, reasons and
condition types), ``schema`` and ``crd`` (the CRD generated from the models)."""
