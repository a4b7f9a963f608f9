"""The batchmark operator: watches BatchBenchmarks (batchmark.dev/v1alpha1) and runs each as a GPU Job.

Layout: ``api`` (the resource's models), ``schema``/``crd`` (the CRD generated from them), ``children`` (the
objects a benchmark owns), ``status`` (the one place that decides phase and conditions), ``reconcile`` (what
the operator does, as plain functions), ``handlers`` (kopf's decorators only), ``service`` (``batchmark
operator``), ``metrics`` (its /metrics), ``rbac`` (the permissions it needs), ``manifest`` and ``fetch``
(``batchmark manifest`` and ``batchmark results``). See README.md next to this file.
"""
