"""The runner's configuration, one module per section of a run's config (``--backend``, ``--data``,
``--profile``, ``--constraint``, ``--sweep``, ``--slo``, ``--cost``; ``run`` holds them together): one set of
models for the CLI, config files, the CRD schema and the docs.

Field names are snake_case (GuideLLM's spellings); every model also accepts the camelCase form that
Kubernetes resources use. Unknown keys are errors.
"""
