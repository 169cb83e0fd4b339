"""The S3 client under :mod:`.s3`: settings, one obstore client per bucket, requests, errors, retries.

Settings come from :class:`~.s3location.S3Options` first, then the standard AWS variables
(``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_DEFAULT_REGION``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), then the profile
(``AWS_PROFILE``, else ``default``) of the shared files (``~/.aws/credentials`` and
``~/.aws/config``, or ``AWS_SHARED_CREDENTIALS_FILE`` and ``AWS_CONFIG_FILE``). A profile named
in the options takes its keys from the files even when the key variables are set. A custom
endpoint is addressed path-style; an ``http://`` one is allowed. No credential ever appears in a
message: an error shows the bucket, the key and the server's error code only.

A process that has made a request must not fork a child that uses S3: obstore's runtime does
not survive a fork (the child's first request hangs). Importing obstore, or making a client
without using it, is fine; the worker processes are forked before any request (a foreground
submit's standby workers) or by a fork server that never makes one.

Every obstore error is turned into a coded one here, in :func:`translated`. Conditional writes
go through :func:`conditional`, which retries what may succeed on a second try (409
``ConditionalRequestConflict``, 5xx, a lost connection) with backoff, and tells the caller when
an earlier try may have been applied: a 412 after such a try may be the caller's own write.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.store import S3Store
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_chain,
    wait_exponential_jitter,
    wait_random,
)

from ..config.s3location import S3Location, S3Options, aws_profile, endpoint_of, profile_name_of
from ..core.errors import BadS3Settings, BucketForbidden, BucketMissing, StorageUnreachable

T = TypeVar("T")

#: Content-Type by extension: what a CDN or a bucket website serves each object as.
CONTENT_TYPES = {
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "webp": "image/webp",
    "avif": "image/avif",
    "png": "image/png",
    "html": "text/html",
    "json": "application/json",
}
#: The user metadata key holding the sha256 of an object's bytes (``x-amz-meta-sha256``).
CHECKSUM = "sha256"
_DEFAULT_REGION = "us-east-1"
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([A-Za-z]{1,64})</Code>")
_NO_ANSWER = re.compile(r"error sending request|connect|timed out|timeout|connection|dns error|broken pipe", re.I)
#: The most tries of one request; the retry window (S3Options.retry_seconds) usually ends it first.
_ATTEMPTS = 40
_MAX_BACKOFF = 2.0
_SIGNED_SECONDS = 60


def content_type(name: str) -> str:
    return CONTENT_TYPES.get(name.rsplit(".", 1)[-1].lower(), "application/octet-stream")


def image_content_type(data: bytes, name: str) -> str:
    """The Content-Type of a thumbnail: its image format's, read from its first bytes (a name's
    extension is the template's, and may be none); by the name's extension when it is no image."""
    from ..imaging.formats import SNIFF_BYTES, sniff_format  # only a name's publish needs it

    found = sniff_format(data[:SNIFF_BYTES])
    return f"image/{found}" if found in ("jpeg", "png", "webp", "avif", "gif") else content_type(name)


# -- settings ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What a client of a bucket is made with (hashable: clients are shared by settings)."""

    endpoint: str | None
    region: str
    access_key_id: str | None
    secret_access_key: str | None = field(repr=False)
    session_token: str | None = field(repr=False)

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"region": self.region}
        if self.endpoint:
            config |= {"endpoint": self.endpoint, "virtual_hosted_style_request": False}
        if self.access_key_id and self.secret_access_key:
            config |= {"access_key_id": self.access_key_id, "secret_access_key": self.secret_access_key}
            if self.session_token:
                config["token"] = self.session_token
        return config


def settings_of(options: S3Options, env: Mapping[str, str] | None = None) -> Settings:
    """The endpoint, region and credentials of ``options``, the AWS variables and the shared files."""
    env = os.environ if env is None else env
    profile = aws_profile(env, profile_name_of(options, env))
    from_env = not options.profile and env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY")
    keys = (
        (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN"))
        if from_env
        else (profile.get("aws_access_key_id"), profile.get("aws_secret_access_key"), profile.get("aws_session_token"))
    )
    endpoint, _ = endpoint_of(options, env, profile)
    region = (
        options.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or profile.get("region")
    ) or _DEFAULT_REGION
    return Settings(_checked_endpoint(endpoint.strip()) if endpoint else None, region, *keys)


def _checked_endpoint(endpoint: str) -> str:
    """The endpoint without a trailing slash; BadS3Settings unless it is an http(s) URL of a host
    (no user or password in it, no path): the client would fail on it deep inside."""
    try:
        parts = urlsplit(endpoint)
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        parts, port_ok = None, False
    valid = (
        parts is not None
        and port_ok
        and parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and parts.username is None
        and parts.path in ("", "/")
        and not parts.query
        and not parts.fragment
        and all(ch.isprintable() and not ch.isspace() for ch in endpoint)
    )
    if not valid:
        shown = f"{parts.scheme}://{parts.hostname}" if parts is not None and parts.hostname else "it"
        raise BadS3Settings(
            f"the S3 endpoint ({shown}) is not an http:// or https:// URL of a host, without a path "
            "(from thumbctl's S3 settings, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the profile's endpoint_url)"
        )
    return endpoint.rstrip("/")


# -- clients ----------------------------------------------------------------------------------------

_CLIENTS: dict[tuple[str, Settings, bool, float], S3Store] = {}
_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_CLIENTS.clear)


_SETTINGS: dict[tuple[str | None, ...], Settings] = {}


def client(location: S3Location, options: S3Options, *, retried: bool = True) -> S3Store:
    """The shared client of the location's bucket. ``retried`` False gives one that never retries by
    itself: conditional writes retry through :func:`conditional`, which knows what a retry means.

    The settings are resolved once per process for each set of options and AWS variables: the
    shared files are read at the first use, not at every request."""
    aws = tuple(sorted((name, value) for name, value in os.environ.items() if name.startswith("AWS_")))
    seen = (options.endpoint, options.region, options.profile, *(f"{name}={value}" for name, value in aws))
    with _LOCK:
        settings = _SETTINGS.get(seen)
        if settings is None:
            settings = _SETTINGS[seen] = settings_of(options)
        key = (location.bucket, settings, retried, options.retry_seconds)
        found = _CLIENTS.get(key)
        if found is None:
            found = _CLIENTS[key] = _new_client(location.bucket, settings, retried, options.retry_seconds)
    return found


def _new_client(bucket: str, settings: Settings, retried: bool, retry_seconds: float) -> S3Store:
    retry = {
        "max_retries": _ATTEMPTS if retried else 0,
        "retry_timeout": datetime.timedelta(seconds=retry_seconds),
        "backoff": {
            "init_backoff": datetime.timedelta(milliseconds=50),
            "max_backoff": datetime.timedelta(seconds=_MAX_BACKOFF),
            "base": 2,
        },
    }
    client_options = {
        "allow_http": bool(settings.endpoint and settings.endpoint.startswith("http://")),
        "connect_timeout": "5s",
        "timeout": "60s",
    }
    return S3Store(bucket, config=settings.config(), client_options=client_options, retry_config=retry)


# -- errors ------------------------------------------------------------------------------------------


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an obstore error reports, None when there was no answer (no connection)."""
    found = _STATUS.search(str(exc))
    return int(found.group(1)) if found else None


def _server_code(exc: BaseException | str) -> str:
    found = _CODE.search(str(exc))
    return f" ({found.group(1)})" if found else ""


@contextlib.contextmanager
def translated(location: S3Location, key: str, *, writing: bool = False) -> Iterator[None]:
    """Turn obstore's errors into coded ones: a bucket that is missing (``bucket_missing``),
    refuses access (``bucket_forbidden``) or cannot be reached (``storage_unreachable``). A
    missing key stays FileNotFoundError, except on a write, where only the bucket can be missing (a
    HEAD cannot tell a missing bucket from a missing key: its 404 has no body); 412 stays
    PreconditionError or AlreadyExistsError for the caller to judge."""
    where = f"s3://{location.bucket}/{key}"
    try:
        yield
    except (AlreadyExistsError, PreconditionError):
        raise
    except (NotFoundError, FileNotFoundError) as exc:
        if writing or "NoSuchBucket" in str(exc):
            raise BucketMissing(f"{where}: the bucket {location.bucket!r} does not exist{_server_code(exc)}") from None
        raise FileNotFoundError(2, "no such object", where) from None
    except (PermissionDeniedError, UnauthenticatedError) as exc:
        raise BucketForbidden(f"{where}: access refused{_server_code(exc)}; check the credentials") from None
    except BaseError as exc:
        raise _generic(where, location, exc) from None


def _generic(where: str, location: S3Location, exc: BaseError) -> Exception:
    status = status_of(exc)
    text = str(exc)
    if status in (401, 403) or "InvalidAccessKeyId" in text:
        return BucketForbidden(f"{where}: access refused{_server_code(exc)}; check the credentials")
    if status == 404 or "NoSuchBucket" in text:
        return BucketMissing(f"{where}: the bucket {location.bucket!r} does not exist{_server_code(exc)}")
    if _no_answer(exc) or (status is not None and (status >= 500 or status in (408, 429))):
        answer = f"it answered {status}{_server_code(exc)}" if status else "no connection"
        return StorageUnreachable(f"{where}: the S3 server cannot be reached now ({answer}); retry later")
    if status is None:
        return OSError(errno.EINVAL, f"the S3 request could not be made ({type(exc).__name__})", where)
    return OSError(errno.EIO, f"the S3 request failed with status {status}{_server_code(exc)}", where)


def _no_answer(exc: BaseException) -> bool:
    """Whether the request got no answer: no connection, a timeout, a connection dropped."""
    return status_of(exc) is None and _NO_ANSWER.search(str(exc)) is not None


# -- conditional writes --------------------------------------------------------------------------------


def _retryable(exc: BaseException) -> bool:
    """409 (ConditionalRequestConflict: another conditional write to the key is in flight), 5xx,
    408, 429 and no answer at all are worth another try."""
    if not isinstance(exc, BaseError) or isinstance(exc, (NotFoundError, PermissionDeniedError, UnauthenticatedError)):
        return False
    status = status_of(exc)
    return _no_answer(exc) or (status is not None and (status >= 500 or status in (408, 409, 429)))


def conditional(write: Callable[[], T], retry_seconds: float) -> tuple[T | BaseException, bool]:
    """Run a conditional write, retrying with backoff (see :func:`_retryable`) for up to
    ``retry_seconds`` after its first try failed. Returns its result or the error that ended it
    (412 as AlreadyExistsError or PreconditionError; anything else is raised), and whether an
    earlier try may have been applied (its answer was lost or a 5xx)."""
    tries = _ConditionalTries(write)
    retrying = Retrying(
        stop=stop_after_attempt(_ATTEMPTS) | tries.window(retry_seconds),
        # a short jitter before the second try, then 0.05 s doubling, plus up to 1 s, at most 2 s
        wait=wait_chain(wait_random(0.02, 0.05), wait_exponential_jitter(multiplier=0.025, max=_MAX_BACKOFF)),
        retry=retry_if_exception(_retryable),
        reraise=True,
    )
    return retrying(tries.attempt), tries.uncertain


class _ConditionalTries(Generic[T]):
    """The tries of one conditional write: whether one may have been applied, and when the first failed."""

    def __init__(self, write: Callable[[], T]) -> None:
        self.write = write
        self.uncertain = False
        self.first_failed: float | None = None

    def attempt(self) -> T | BaseException:
        try:
            return self.write()
        except (AlreadyExistsError, PreconditionError) as exc:
            if status_of(exc) == 409:
                self._failed()
                raise
            return exc
        except BaseError as exc:
            self._failed()
            if _retryable(exc) and status_of(exc) != 409:  # a 409 was refused, never applied
                self.uncertain = True
            raise

    def _failed(self) -> None:
        if self.first_failed is None:
            self.first_failed = time.monotonic()

    def window(self, retry_seconds: float) -> Callable[[RetryCallState], bool]:
        """A tenacity stop: ``retry_seconds`` have passed since the first try failed (a first try
        that hung until its timeout still gets its retries)."""

        def passed(state: RetryCallState) -> bool:
            return self.first_failed is not None and time.monotonic() - self.first_failed >= retry_seconds

        return passed


def put(store: S3Store, key: str, data: bytes, attributes: dict[str, str], mode: Any) -> str:
    """One PUT of ``data`` (never multipart: a conditional write is one request); returns the ETag."""
    done = obstore.put(store, key, data, attributes=attributes, mode=mode, use_multipart=False)
    return done["e_tag"] or ""


def head(store: S3Store, key: str) -> tuple[int, str, dict[str, str]] | None:
    """(size, ETag, attributes) of ``key``, None when it is absent."""
    try:
        got = obstore.get(store, key, options={"head": True})
    except (NotFoundError, FileNotFoundError):
        return None
    meta = got.meta
    return meta["size"], meta["e_tag"] or "", dict(got.attributes)


def read_bounded(store: S3Store, key: str, limit: int) -> bytes | None:
    """The bytes of ``key`` when it holds at most ``limit``, None when it holds more (its size is
    known before the body is read; the body is never read past ``limit + 1``). FileNotFoundError
    when it is absent."""
    got = obstore.get(store, key)
    if got.meta["size"] > limit:
        return None
    data = bytearray()
    for chunk in got:
        data += chunk
        if len(data) > limit:
            return None
    return bytes(data)


def delete_if_match(location: S3Location, store: S3Store, key: str, e_tag: str) -> bool | None:
    """DELETE ``key`` with ``If-Match: e_tag`` through a short-lived signed URL: True when removed,
    False on 412 or 404 (it holds another version, or is gone), None when the server does not
    implement a conditional DELETE (501; the caller then decides). The URL is never shown: it
    carries a signature."""
    import urllib3

    where = f"s3://{location.bucket}/{key}"
    url = obstore.sign(store, "DELETE", key, datetime.timedelta(seconds=_SIGNED_SECONDS))
    try:
        answer = _HTTP.request("DELETE", url, headers={"If-Match": e_tag}, retries=False, timeout=30.0)
    except urllib3.exceptions.HTTPError:
        raise StorageUnreachable(f"{where}: the S3 server cannot be reached now (no connection); retry later") from None
    status = answer.status
    code = _server_code(answer.data.decode("utf-8", "replace")[:2000]) if status >= 300 else ""
    if status in (200, 204):
        return True
    if status in (404, 412):
        return False
    if status == 501:
        return None
    if status in (401, 403):
        raise BucketForbidden(f"{where}: access refused{code}; check the credentials")
    if status >= 500 or status in (408, 429):
        raise StorageUnreachable(
            f"{where}: the S3 server cannot be reached now (it answered {status}{code}); retry later"
        )
    raise OSError(5, f"the S3 request failed with status {status}{code}", where)


class _LazyPool:
    """One urllib3 pool manager per process, made on first use."""

    def __init__(self) -> None:
        self._pool: Any = None

    def request(self, *args: Any, **kwargs: Any) -> Any:
        if self._pool is None:
            import urllib3

            self._pool = urllib3.PoolManager(num_pools=4, maxsize=8)
        return self._pool.request(*args, **kwargs)


_HTTP = _LazyPool()
os.register_at_fork(after_in_child=_HTTP.__init__)
