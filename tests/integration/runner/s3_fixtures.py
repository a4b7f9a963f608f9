"""pytest fixtures that give tests a real S3-compatible server: SeaweedFS (devtools/s3server.py), one per test
module, on free ports of 127.0.0.1. Import them into a test module (`from tests.integration.runner.s3_fixtures
import s3, s3_server_of_module`).

Without the binary (`scripts/setup/seaweedfs.sh` builds it) the tests that use them are skipped, unless CI is set,
where they fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools.s3server import S3Server, SeaweedFSMissingError, locate_weed, s3_server

# Variables of the machine's own AWS set-up that would change where, or as whom, the store connects.
AWS_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)


def aws_settings_of(store_variables: Mapping[str, str], tmp_path: Path) -> dict[str, str]:
    """The variables to set, beside removing AWS_VARIABLES, for a process to reach one store as one identity: the
    store's own (endpoint, keys, region) and nothing of the machine's (no ~/.aws files, no instance metadata)."""
    return {
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        **store_variables,
    }


def use_only_store(monkeypatch: pytest.MonkeyPatch, store_variables: Mapping[str, str], tmp_path: Path) -> None:
    """This process's environment pointed at one store only (aws_settings_of)."""
    for variable in AWS_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    for variable, value in aws_settings_of(store_variables, tmp_path).items():
        monkeypatch.setenv(variable, value)


def required_weed() -> Path:
    """The SeaweedFS binary; without it the calling test is skipped (fails where CI is set)."""
    try:
        return locate_weed()
    except SeaweedFSMissingError as error:
        if os.environ.get("CI"):
            pytest.fail(str(error))
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def s3_server_of_module() -> Iterator[S3Server]:
    """One server for the module's tests (it takes ~10 s to start); each test works under a prefix of its own."""
    with s3_server(bucket="batchmark-tests", binary=required_weed()) as server:
        yield server


@dataclass(frozen=True)
class S3Store:
    """A test's store on the server: s3://BUCKET/PREFIX, with the AWS_* variables that reach it set."""

    server: S3Server
    url: str
    prefix: str

    def key(self, *parts: str) -> str:
        """A path in the store as pyarrow's S3 file system names it: BUCKET/PREFIX/PART/..."""
        return "/".join((self.server.bucket, self.prefix, *parts))


@pytest.fixture
def s3(s3_server_of_module: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> S3Store:
    """A store of the test's own on the module's server, and this process's environment pointed at it (and at
    nothing of the machine's: no ~/.aws, no instance metadata)."""
    use_only_store(monkeypatch, s3_server_of_module.environment(), tmp_path)
    prefix = f"tests/{uuid.uuid4().hex[:12]}"
    return S3Store(server=s3_server_of_module, url=f"s3://{s3_server_of_module.bucket}/{prefix}", prefix=prefix)
