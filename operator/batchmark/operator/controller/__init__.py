"""The running operator (``batchmark operator``), which uses of the runner only its contract and config models.

``service`` (the process), ``handlers`` (kopf's decorators and its run, the only module that imports kopf),
``dispatch`` (what each event leads to), ``workers`` (the threads and locks), ``reconcile`` (what the operator
does, as plain code), ``status`` (the one place that decides phase and conditions), ``children`` (the objects a
benchmark owns), ``watched`` (kopf's indices of Jobs, pods and Workloads), ``kube`` (the API server), ``kueue``
and ``positions`` (Kueue's Workloads and queue positions), ``metrics`` (its /metrics), ``rbac`` (the
permissions it needs).
"""
