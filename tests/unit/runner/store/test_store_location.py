"""`--store`: a folder or s3://BUCKET/PREFIX, parsed without a request; the S3 endpoint from AWS's variables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from batchmark.runner.config.store import S3Endpoint, S3Location, first_line, s3_endpoint, store_location


@pytest.mark.parametrize(
    ("text", "bucket", "prefix"),
    [
        ("s3://runs", "runs", ""),
        ("s3://runs/", "runs", ""),
        ("s3://my-team.results/nightly", "my-team.results", "nightly"),
        ("s3://bucket/a/b/c/", "bucket", "a/b/c"),
        ("S3://bucket/x", "bucket", "x"),
        ("s3://b12/team=a/run+1@host,x", "b12", "team=a/run+1@host,x"),
        (f"s3://{'a' * 63}/{'p' * 512}", "a" * 63, "p" * 512),
    ],
)
def test_s3_stores(text: str, bucket: str, prefix: str) -> None:
    location = store_location(text)
    assert location == S3Location(bucket=bucket, prefix=prefix)
    assert isinstance(location, S3Location)
    assert location.root == (f"{bucket}/{prefix}" if prefix else bucket)
    assert str(location) == f"s3://{location.root}"


@pytest.mark.parametrize(
    ("text", "folder"),
    [
        ("./results", Path("results")),
        ("/srv/runs", Path("/srv/runs")),
        ("file:///srv/my%20runs", Path("/srv/my runs")),
        ("file://localhost/srv/runs", Path("/srv/runs")),
        ("C:/runs", Path("C:/runs")),  # a drive, not a scheme
        ("s3:bucket", Path("s3:bucket")),  # a file name with a colon
        ("runs/s3://x", Path("runs/s3://x")),
    ],
)
def test_folders(text: str, folder: Path) -> None:
    assert store_location(text) == folder


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "names no folder"),
        ("s3://", "names no bucket"),
        ("s3:///runs", "names no bucket"),
        ("s3://ab", "3 to 63 characters long, not 2"),
        (f"s3://{'a' * 64}", "3 to 63 characters long, not 64"),
        ("s3://My-Bucket/x", "'My-Bucket' is not a bucket's name"),
        ("s3://my_bucket/x", "'my_bucket' is not a bucket's name"),
        ("s3://bucket-/x", "is not a bucket's name"),
        ("s3://.bucket/x", "is not a bucket's name"),
        ("s3://my..bucket/x", "two dots in a row"),
        ("s3://10.0.0.1/x", "is an IP address"),
        ("s3://bucket:9000/x", "names a bucket, not a server"),
        ("s3://key:secret@bucket/x", "carries no credentials"),
        ("s3://bucket/x?versionId=3", "no query or fragment"),
        ("s3://bucket/x#top", "no query or fragment"),
        ("s3://bucket/a//b", "an empty, '.' or '..' part"),
        ("s3://bucket/a/./b", "an empty, '.' or '..' part"),
        ("s3://bucket/../b", "an empty, '.' or '..' part"),
        ("s3://bucket/a b", "contains ' '"),
        ("s3://bucket/a\\b", "contains '\\\\'"),
        ("s3://bucket/a\tb", "contains '\\t'"),
        ("s3://bucket/é", "contains 'é'"),
        (f"s3://bucket/{'p' * 513}", "longer than 512 bytes"),
        ("s3://bucket/\x00", "NUL"),
        ("gs://bucket/x", "gs:// stores are not supported"),
        ("https://example.com/runs", "https:// stores are not supported"),
        ("file://server/runs", "names the host 'server'"),
    ],
)
def test_refusals(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        store_location(text)
    assert "\n" not in str(raised.value)


def test_credentials_in_a_url_are_never_repeated() -> None:
    with pytest.raises(ValueError, match="carries no credentials") as raised:
        store_location("s3://AKIAEXAMPLE:wJalrXUtnFEMI@bucket/x")
    assert "wJalrXUtnFEMI" not in str(raised.value)
    assert "AKIAEXAMPLE" not in str(raised.value)


def test_a_long_location_is_shortened_in_messages() -> None:
    with pytest.raises(ValueError, match="3 to 63 characters long, not 3001") as raised:
        store_location("s3://B" + "x" * 3000)
    assert len(str(raised.value)) < 400


@pytest.mark.parametrize(
    ("environ", "endpoint"),
    [
        ({}, None),
        ({"AWS_ENDPOINT_URL": ""}, None),
        ({"AWS_ENDPOINT_URL": "http://127.0.0.1:8333"}, S3Endpoint("127.0.0.1:8333", "http")),
        ({"AWS_ENDPOINT_URL": "https://s3.example.com/"}, S3Endpoint("s3.example.com", "https")),
        ({"AWS_ENDPOINT_URL": "http://[::1]:9000"}, S3Endpoint("[::1]:9000", "http")),
        (
            {"AWS_ENDPOINT_URL": "http://general:1", "AWS_ENDPOINT_URL_S3": "http://s3-only:2"},
            S3Endpoint("s3-only:2", "http"),
        ),
        ({"AWS_ENDPOINT_URL": "http://x:1", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"}, None),
    ],
)
def test_the_endpoint_from_the_environment(environ: dict[str, str], endpoint: S3Endpoint | None) -> None:
    assert s3_endpoint(environ) == endpoint


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"AWS_ENDPOINT_URL": "127.0.0.1:8333"}, "AWS_ENDPOINT_URL: '127.0.0.1:8333' is not the URL"),
        ({"AWS_ENDPOINT_URL": "ftp://host"}, "is not the URL of an S3 endpoint"),
        ({"AWS_ENDPOINT_URL": "http://"}, "is not the URL of an S3 endpoint"),
        ({"AWS_ENDPOINT_URL": "http://host:port"}, "is not the URL of an S3 endpoint"),
        ({"AWS_ENDPOINT_URL_S3": "http://host/bucket"}, "AWS_ENDPOINT_URL_S3: 'http://host/bucket': give only"),
        ({"AWS_ENDPOINT_URL": "http://user:pw@host"}, "give only the scheme, host and port"),
    ],
)
def test_endpoints_that_are_not_one(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        s3_endpoint(environ)


def test_s3_errors_say_what_to_check() -> None:
    denied = OSError("When getting information: AWS Error ACCESS_DENIED during HeadBucket operation: No body.\nmore")
    assert first_line(denied) == (
        "When getting information: AWS Error ACCESS_DENIED during HeadBucket operation: No body. (check"
        " AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and that they may use the bucket)"
    )
    unreachable = OSError("AWS Error NETWORK_CONNECTION during PutObject operation: curlCode: 7")
    assert first_line(unreachable).endswith("(check AWS_ENDPOINT_URL and that the server is up)")
    assert first_line(OSError("disk full")) == "disk full"
    assert first_line(OSError()) == "OSError"
