"""S3 for the run directory: the options storage.path's query may carry, the credentials (read here, on this
node: storage.credentials_file, or pyarrow's default chain), pyarrow's S3 filesystem, and whether its traffic
crosses a network unencrypted. Credentials never travel: each process that opens S3 calls this on its own node
(raytf issue 19)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pyarrow.fs as pafs

from raytf.config import StorageConfig
from raytf.errors import ConfigError

# S3 options a URI's query may carry that raytf's own S3 filesystem takes (pyarrow's from_uri takes more).
_S3_QUERY_OPTIONS = ("endpoint_override", "scheme", "region")


def with_query_options(o: StorageConfig, query: str) -> StorageConfig:
    """`o` with the S3 options given in storage.path's query (?endpoint_override=...&scheme=http), for raytf's own
    S3 filesystem, which alone can take the credentials read from storage.credentials_file."""
    from urllib.parse import parse_qsl

    given = dict(parse_qsl(query, keep_blank_values=True))
    if other := sorted(set(given) - set(_S3_QUERY_OPTIONS)):
        raise ConfigError(f"storage.path's query has {', '.join(other)}: with storage.credentials_file (or keys) "
                          f"only {', '.join(_S3_QUERY_OPTIONS)} can be given there. Fix: set those as "
                          "storage.endpoint_override, storage.scheme and storage.region, and drop the others")
    return dataclasses.replace(o, **given)


def read_credentials(path: str) -> dict[str, str]:
    """storage.credentials_file, read here, on this node: an AWS-style INI file's `[default]` section
    (aws_access_key_id, aws_secret_access_key, optionally aws_session_token) as pyarrow's S3 options. Anything
    wrong is one ConfigError naming the file and the fix, never its contents."""
    import configparser
    import socket

    where = f"storage.credentials_file ({path!r}) on node {socket.gethostname()}"
    fix = ("Fix: give the path of an AWS-style credentials file present at that path on every node, with a "
           "[default] section holding aws_access_key_id and aws_secret_access_key (aws_session_token optional)")
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file. {fix}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where} is not UTF-8 text. {fix}") from None
    except OSError as e:
        raise ConfigError(f"{where} cannot be read ({e.strerror or type(e).__name__}). {fix}") from None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error as e:  # its message quotes the offending line: never shown
        errors = getattr(e, "errors", None)
        line = getattr(e, "lineno", None) or (errors[0][0] if errors else None)
        raise ConfigError(f"{where} is not an INI file ({type(e).__name__}"
                          f"{f' at line {line}' if line else ''}). {fix}") from None
    if not parser.has_section("default"):
        raise ConfigError(f"{where} has no [default] section (sections: {', '.join(parser.sections()) or 'none'}). "
                          f"{fix}")
    section = parser["default"]
    missing = [k for k in ("aws_access_key_id", "aws_secret_access_key") if not section.get(k, "").strip()]
    if missing:
        raise ConfigError(f"{where}: [default] has no {' or '.join(missing)}. {fix}")
    out = {"access_key": section["aws_access_key_id"].strip(), "secret_key": section["aws_secret_access_key"].strip()}
    if token := section.get("aws_session_token", "").strip():
        out["session_token"] = token
    return out


def s3_credentials(o: StorageConfig) -> dict[str, str]:
    """The credentials to pass to pyarrow's S3 filesystem: storage.access_key/secret_key (reading runs in this
    process: a run refuses them), else storage.credentials_file read on this node, else none (pyarrow's default
    chain on this node: environment, instance profile, ~/.aws/credentials)."""
    if o.access_key is not None and o.secret_key is not None:
        return {"access_key": o.access_key, "secret_key": o.secret_key}
    if o.credentials_file:
        return read_credentials(o.credentials_file)
    return {}


def plain_http_endpoint(o: StorageConfig) -> str | None:
    """The S3 endpoint, when its traffic (checkpoints, and request signatures an eavesdropper can replay for their
    validity) would cross a network unencrypted: storage.scheme=http to a host that is not this machine's
    loopback. Pure."""
    from urllib.parse import parse_qs, urlsplit

    query = parse_qs(o.path.partition("?")[2])
    scheme = (query.get("scheme") or [o.scheme or ""])[0]
    endpoint = (query.get("endpoint_override") or [o.endpoint_override or ""])[0]
    if not o.path.startswith("s3://") or scheme != "http" or not endpoint:
        return None
    host = urlsplit(f"//{endpoint.split('://')[-1]}").hostname or ""
    loopback = host == "localhost" or host == "::1" or host.startswith("127.")
    return None if loopback else endpoint


def s3_filesystem(o: StorageConfig, credentials: dict[str, str]) -> pafs.S3FileSystem:
    kwargs: dict[str, Any] = {"allow_bucket_creation": True, **credentials}
    for key in ("endpoint_override", "scheme", "region"):
        if getattr(o, key) is not None:
            kwargs[key] = getattr(o, key)
    # Our own retry loop (with back-off) decides; the SDK's would hide a dead endpoint for minutes.
    kwargs.update(connect_timeout=5, request_timeout=30,
                  retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=2))
    return pafs.S3FileSystem(**kwargs)
