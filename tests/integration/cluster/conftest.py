"""Fixtures of the local cluster's tests: the operator as shipped, the session's (the operator tests' fixtures)."""

from __future__ import annotations

import pytest

# The session's CRD and installed operator, shared with tests/integration/operator (one operator per cluster).
from tests.integration.operator.conftest import batchmark_crd, batchmark_operator  # noqa: F401
from tests.integration.operator.installed import InstalledOperator


@pytest.fixture
def operator(batchmark_operator: InstalledOperator) -> InstalledOperator:  # noqa: F811
    """The session's operator, installed by helm from its image, watching every namespace."""
    return batchmark_operator
