"""The permissions the operator itself needs, cluster-wide (the chart's ClusterRole is written from this list).

Why each:
- batchbenchmarks: watch them; patch for kopf's progress annotations. Their status: the operator's fields.
  Their finalizers (update): the children's owner references block their owner's deletion until the garbage
  collector removed them, which the OwnerReferencesPermissionEnforcement admission plugin allows only to
  whoever may update the owner's finalizers.
- jobs: create the benchmark's Job, watch it, patch ``spec.suspend`` to cancel.
- pods: watch the Job's pods for the phase (scheduling, termination messages).
- configmaps, serviceaccounts, roles, rolebindings: create only, the benchmark's children (never read nor
  change one: a name taken is recognised by the uid in it, batchmark.operator.controller.children). The runner's Role
  grants get/patch on its one benchmark's status and create on configmaps, both held here, so the operator
  needs neither ``escalate`` nor ``bind``, and cannot create a Role granting what it does not hold (reading
  or changing a ConfigMap, Secrets, ...). Kubernetes cannot narrow ``create`` to names, and ``list``/``watch``
  to labels: see the operator's README, "Privileges".
- events: the transitions it records (and kopf's warnings).
- customresourcedefinitions and namespaces: kopf discovers its resources and namespaces with them (namespaces
  also when it watches a list of them: the chart keeps both in its ClusterRole with operator.watchNamespaces).
- Kueue (kueue.x-k8s.io), for benchmarks with spec.queueName: workloads, to follow admission and preemption
  (patch: a cancelled queued benchmark's Workload is deactivated); localqueues (watched: a queued benchmark's
  is looked up in kopf's index) and workloadpriorityclasses, checked before the Job is created;
  localqueues/pendingworkloads of Kueue's visibility API
  (visibility.kueue.x-k8s.io), read for the positions of the Queued benchmarks (one GET per LocalQueue).
"""

from __future__ import annotations

from typing import Any

OPERATOR_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["batchmark.dev"], "resources": ["batchbenchmarks"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["batchmark.dev"], "resources": ["batchbenchmarks/status"], "verbs": ["get", "patch", "update"]},
    {"apiGroups": ["batchmark.dev"], "resources": ["batchbenchmarks/finalizers"], "verbs": ["update"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch", "create", "patch"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["configmaps", "serviceaccounts"], "verbs": ["create"]},
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloadpriorityclasses"], "verbs": ["get"]},
    {"apiGroups": ["visibility.kueue.x-k8s.io"], "resources": ["localqueues/pendingworkloads"], "verbs": ["get"]},
]
