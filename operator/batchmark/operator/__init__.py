"""The batchmark operator: watches BatchBenchmarks (batchmark.dev/v1alpha1) and runs each as a GPU Job.

Layout, each layer importing only those below it: ``commands`` (the ``batchmark`` subcommands it registers),
``client`` (the user's commands: ``batchmark results`` and ``batchmark manifest``), ``controller`` (the running
operator, ``batchmark operator``), ``resource`` (the BatchBenchmark's models and the CRD generated from them).
See README.md next to this file.
"""
