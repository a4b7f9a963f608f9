"""What the operator uses of JobSet (jobset.x-k8s.io), which runs a benchmark over several pods as one group.

A benchmark's JobSet has one replicated Job, ``runner``, of one pod per Job: its Jobs are
``<benchmark>-runner-<index>``, and JobSet labels (and annotates) each Job and pod with its JobSet's uid and the
Job's index.
"""

from __future__ import annotations

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_API_VERSION = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
JOBSET_PLURAL = "jobsets"
REPLICATED_JOB = "runner"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
# The longest name of a benchmark over several pods: its Jobs' names, `<name>-runner-<index>`, are label values
# (at most 63 characters), with room for an index of three digits.
MAX_JOBSET_NAME = 63 - len(f"-{REPLICATED_JOB}-") - 3
