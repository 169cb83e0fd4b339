"""The secrets a URL source may carry, and the forms of it that are recorded and shown.

* Credentials in the userinfo (``https://user:password@host/``) are never downloaded with, and
  never recorded: the source is recorded without them (:func:`without_userinfo`) and its items
  fail ``source_forbidden_address``.
* A signed URL's query (``X-Amz-Signature``, ``Signature``, ``sig``, ``token``, ...) is recorded
  as given, because the worker downloads the source again with it, but every place that shows a
  source or a message (``status``, ``events``, the batch manifest, the sheet, logs) shows it
  through :func:`shown_source` or :func:`redacted_text`: each secret parameter's value is
  replaced by ``REDACTED``, the other parameters are kept.

Nothing here imports more than the standard library's text functions: listings use it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

#: What replaces a secret parameter's value.
REDACTED = "REDACTED"
#: Query parameters (compared lower-cased) whose value is a secret: the signatures, credentials,
#: policies and tokens of S3, CloudFront, Google Cloud Storage and Azure signed URLs, and the
#: usual names of API keys and tokens.
SECRET_PARAMETERS = frozenset(
    {
        "sig",
        "signature",
        "policy",
        "key-pair-id",
        "key",
        "apikey",
        "api_key",
        "api-key",
        "auth",
        "code",
        "password",
        "passwd",
        "pwd",
    }
)
#: A parameter whose name contains one of these is a secret too (``X-Amz-Signature``,
#: ``X-Amz-Credential``, ``X-Amz-Security-Token``, ``X-Goog-Signature``, ``access_token``, ...).
SECRET_PARTS = ("signature", "token", "secret", "password", "credential")

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: A URL inside a message: a scheme, ``://`` and what follows up to white space or a quote, less
#: the punctuation that ends a sentence or a clause after it.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>`]*[^\s\"'<>`.,:;)!?]")


def is_secret_parameter(name: str) -> bool:
    """Whether a query parameter named ``name`` (as written, percent-encoded or not) holds a secret."""
    plain = unquote_plus(name).strip().lower()
    return plain in SECRET_PARAMETERS or any(part in plain for part in SECRET_PARTS)


def _split_authority(url: str) -> tuple[str, str, str] | None:
    """(``scheme://``, authority, the rest from the path on), or None for text that is no URL."""
    match = _SCHEME.match(url)
    if match is None:
        return None
    rest = url[match.end() :]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return match.group(0), rest[:end], rest[end:]


def has_userinfo(url: str) -> bool:
    """Whether ``url`` names credentials (``user@`` or ``user:password@`` before its host)."""
    parts = _split_authority(url)
    return parts is not None and "@" in parts[1]


def without_userinfo(url: str) -> str:
    """``url`` without the credentials of its authority (the rest as given)."""
    parts = _split_authority(url)
    if parts is None:
        return url
    scheme, authority, rest = parts
    return f"{scheme}{authority.rpartition('@')[2]}{rest}"


def _redacted_parameters(text: str) -> str:
    """A query or fragment (without its ``?`` or ``#``) with each secret parameter's value replaced."""
    pieces = []
    for piece in re.split(r"([&;])", text):
        name, equals, _ = piece.partition("=")
        if piece not in ("&", ";") and is_secret_parameter(name):
            piece = f"{name}={REDACTED}" if equals else REDACTED
        pieces.append(piece)
    return "".join(pieces)


def shown_source(source: str) -> str:
    """A source as it may be shown: a URL without credentials and with every secret parameter of
    its query and fragment redacted; a path as it is."""
    parts = _split_authority(source)
    if parts is None:
        return source
    url = without_userinfo(source)
    base, hash_, fragment = url.partition("#")
    path, question, query = base.partition("?")
    shown = path + question + _redacted_parameters(query)
    return shown + hash_ + _redacted_parameters(fragment) if hash_ else shown


def redacted_text(text: str) -> str:
    """A message with every URL in it shown as :func:`shown_source` shows it."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda match: shown_source(match.group(0)), text)
