"""Which 403 answers in an operator's log are refusals of its privileges.

The operator watches every namespace, so its log also holds refusals that are no one's privileges: the API
server answers 403 to anything created in a namespace that an earlier test is still deleting (one that failed
leaves its benchmarks behind it). Only a refusal by the authorizer (RBAC) is a missing privilege; a namespace
being terminated is told apart by its cause; any other 403 is one no one explained.
"""

from __future__ import annotations

import re

# Each record of the operator's log starts with its time stamp; a traceback or an API server's answer
# (kubernetes.client prints the reason, the headers and the body on lines of their own) belongs to the one above.
_RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", re.MULTILINE)
# The authorizer's refusal, in the Status message however it is quoted: 'User "system:serviceaccount:ns:sa"
# cannot create resource "jobs" in API group "batch" in the namespace "ns"' (or '... cannot get path "/x"').
_REFUSED_BY_RBAC = re.compile(r"\bcannot [a-z]+ (?:resource|path) ")
_REFUSAL_SIGNS = ("Forbidden", " 403", "(403)", "ValidatingAdmissionPolicy")
# The NamespaceLifecycle admission plugin's refusal: 'unable to create new content in namespace ns because it is
# being terminated', with the cause NamespaceTerminating.
_NAMESPACE_TERMINATING = ("NamespaceTerminating", "because it is being terminated")


def refusals(log: str) -> list[str]:
    """The log's records that tell of a 403 Forbidden, or of a write an admission policy denied (the chart's
    ValidatingAdmissionPolicies answer 422 Invalid, "... denied request: ...")."""
    starts = [match.start() for match in _RECORD_START.finditer(log)]
    records = [log[start:end] for start, end in zip([0, *starts], [*starts, len(log)], strict=True)]
    return [record for record in records if any(sign in record for sign in _REFUSAL_SIGNS)]


def refused_by_rbac(record: str) -> bool:
    return _REFUSED_BY_RBAC.search(record) is not None


def refused_for_a_terminating_namespace(record: str) -> bool:
    return not refused_by_rbac(record) and any(cause in record for cause in _NAMESPACE_TERMINATING)


def assert_never_refused(log: str) -> None:
    """No refusal by RBAC in the log, and no 403 but those for a namespace being terminated."""
    refused = refusals(log)
    by_rbac = [record for record in refused if refused_by_rbac(record)]
    assert not by_rbac, "refused by RBAC:\n" + "\n".join(by_rbac)[-3000:]
    unexplained = [record for record in refused if not refused_for_a_terminating_namespace(record)]
    assert not unexplained, "refused, and not for a namespace being terminated:\n" + "\n".join(unexplained)[-3000:]
