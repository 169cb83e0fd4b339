"""A ledger's address as a setting: a file path or a PostgreSQL URL, and the only form of a URL shown.

Text only: no driver is imported, so the settings table and every message can use it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus, urlsplit, urlunsplit

SERVER_SCHEMES = ("postgresql://", "postgres://")


def is_server_url(target: object) -> bool:
    """True for a PostgreSQL URL (``--db postgresql://user@host/dbname``); anything else names a file."""
    return isinstance(target, str) and target.startswith(SERVER_SCHEMES)


#: Connection parameters of a PostgreSQL URL's query that hold a secret (libpq's ``?password=``), in
#: any case: libpq refuses ``?PASSWORD=``, and the message saying so shows the URL.
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})


#: A secret parameter's value in a query string: what :func:`masked` replaces when the URL does not parse.
_SECRET_VALUE = re.compile(r"([?&](?:ssl)?password=)([^&#]*)", re.IGNORECASE)


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***``, given in its user part or as a ``?password=``
    parameter: the only form of it ever shown."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not even a URL: mask whatever sits between "user:" and "@", and the parameter
        return _SECRET_VALUE.sub(r"\1***", re.sub(r"(://[^/:@]*:)[^@]*@", r"\1***@", url))
    if password is not None:
        host = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
    query = "&".join(_masked_parameter(pair) for pair in parts.query.split("&"))
    return url if password is None and query == parts.query else urlunsplit(parts._replace(query=query))


def _masked_parameter(pair: str) -> str:
    name, equals, _ = pair.partition("=")
    return f"{name}=***" if equals and unquote_plus(name).lower() in SECRET_PARAMETERS else pair


def url_secrets(url: str) -> list[str]:
    """The secrets written in ``url`` (its user's password, its secret parameters), as written and
    decoded, longest first: what a driver's message must not show."""
    try:
        user = urlsplit(url).password
    except ValueError:
        found = re.search(r"://[^/:@]*:([^@]*)@", url)
        user = found.group(1) if found else None
    written = [user, *(match.group(2) for match in _SECRET_VALUE.finditer(url))]
    return sorted({s for secret in written if secret for s in (secret, unquote_plus(secret))}, key=len, reverse=True)
