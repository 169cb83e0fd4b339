"""An ``s3://bucket/prefix`` location: parsed and checked, thumbctl's own S3 settings, and the
standard AWS variables and files they fall back to (read as text: no S3 client is imported here).

Apart from :mod:`.locations` (which re-exports it) so that the S3 implementations can use it
without importing the factory that imports them.
"""

from __future__ import annotations

import configparser
import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..core.errors import UsageError

S3_SCHEME = "s3://"

# S3's bucket naming rules (3-63 characters, lower case, digits, dots and hyphens, no leading or
# trailing dot or hyphen); path-style servers accept what AWS accepts.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_MAX_PREFIX = 512


class BadLocation(UsageError):
    """An ``s3://`` location that cannot name a bucket prefix (exit 2)."""

    code = "bad_location"


@dataclass(frozen=True)
class S3Location:
    """A bucket and a key prefix inside it (no leading or trailing slash; empty for the whole bucket)."""

    bucket: str
    prefix: str = ""

    @property
    def url(self) -> str:
        """The location as the ledger records it and messages show it: ``s3://bucket/prefix``."""
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{S3_SCHEME}{self.bucket}"

    def key(self, name: str) -> str:
        """The object key of ``name`` (a slash-separated name relative to the location)."""
        return f"{self.prefix}/{name}" if self.prefix else name

    def name_of(self, key: str) -> str | None:
        """The name relative to the location of an object key, None when the key lies outside it."""
        if not self.prefix:
            return key
        head = self.prefix + "/"
        return key[len(head) :] if key.startswith(head) else None

    def join(self, name: str) -> str:
        """The URL of ``name`` inside the location (what the ledger records for an object or a name)."""
        return f"{self.url}/{name}"


@dataclass(frozen=True)
class S3Options:
    """thumbctl's own S3 settings; each None falls back to the standard AWS variables and files
    (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, ...)."""

    endpoint: str | None = None
    region: str | None = None
    profile: str | None = None
    #: Cache-Control of content-addressed objects (never change once written).
    cache_control_objects: str = "public, max-age=31536000, immutable"
    #: Cache-Control of published names and the batch documents (they may be replaced).
    cache_control_names: str = "public, max-age=300"
    #: How long one request is retried through 5xx, 429, 409 and lost connections before it fails:
    #: long enough that a restart of the S3 server stays inside it instead of failing the items.
    retry_seconds: float = 20.0


def is_s3(location: str) -> bool:
    """Whether ``location`` names an S3 bucket (``s3://...``) rather than a local folder."""
    return location[:5].lower() == S3_SCHEME


def parse_s3(location: str) -> S3Location:
    """The bucket and prefix of an ``s3://bucket/prefix`` location; :class:`BadLocation` otherwise."""
    if not is_s3(location):
        raise BadLocation(f"{location!r} is not an s3:// location")
    rest = location[len(S3_SCHEME) :]
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise BadLocation(
            f"{location!r}: {bucket!r} is not a bucket name (3-63 characters: lower-case letters, digits, '.' and '-')"
        )
    prefix = prefix.strip("/")
    parts = prefix.split("/") if prefix else []
    if any(part in ("", ".", "..") for part in parts) or len(prefix) > _MAX_PREFIX:
        raise BadLocation(f"{location!r}: the prefix has an empty, '.' or '..' part, or is too long")
    if any(ord(ch) < 0x20 or ch in "\\\x7f" for ch in prefix):
        raise BadLocation(f"{location!r}: the prefix has a control character or a backslash")
    return S3Location(bucket, prefix)


def profile_name_of(options: S3Options, env: Mapping[str, str]) -> str:
    """The AWS profile in effect: thumbctl's setting, else ``AWS_PROFILE``, ``AWS_DEFAULT_PROFILE``, ``default``."""
    return options.profile or env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"


def aws_profile(env: Mapping[str, str], name: str) -> dict[str, str]:
    """The profile's settings: ``[name]`` of the credentials file over ``[profile name]`` (or
    ``[default]``) of the config file. Unreadable files count as empty."""
    home = os.path.expanduser("~")
    credentials = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, ".aws", "credentials")
    config = env.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config")
    found: dict[str, str] = {}
    section = name if name == "default" else f"profile {name}"
    for path, wanted in ((config, section), (credentials, name)):
        parser = configparser.ConfigParser(interpolation=None)
        with contextlib.suppress(OSError, configparser.Error):
            parser.read(path, encoding="utf-8")
            if parser.has_section(wanted):
                found |= {key: value.strip() for key, value in parser.items(wanted)}
    return found


def endpoint_of(
    options: S3Options, env: Mapping[str, str], profile: Mapping[str, str] | None = None
) -> tuple[str | None, str]:
    """The S3 endpoint in effect (as given, unchecked) and where it comes from: thumbctl's setting,
    ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the profile's ``endpoint_url``; (None, "") for
    the AWS default. ``profile``: the profile's settings, when read already."""
    if options.endpoint:
        return options.endpoint, "setting"
    for variable in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if env.get(variable):
            return env[variable], f"env {variable}"
    name = profile_name_of(options, env)
    found = (aws_profile(env, name) if profile is None else profile).get("endpoint_url")
    return (found, f"AWS profile {name}") if found else (None, "")
