"""Credentials that never print.

A :class:`Secret` holds a value (a DSN with a password, an API key) and shows only ``***`` in
``repr``/``str``, so it can sit in config objects, exceptions and logs safely. Messages from
client libraries are passed through :func:`scrub` before they reach ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

MASK = "***"


@dataclass(frozen=True)
class Secret:
    value: str

    def __repr__(self) -> str:
        return f"Secret({MASK})"

    def __str__(self) -> str:
        return MASK

    def reveal(self) -> str:
        return self.value


def dsn_password(dsn: str) -> str | None:
    """The password in a URL or key=value connection string, if any."""
    if "://" in dsn:
        try:
            password = urlsplit(dsn).password
        except ValueError:
            return None
        return unquote(password) if password else None
    for part in dsn.split():
        key, sep, value = part.partition("=")
        if sep and key.strip() == "password":
            return value.strip("'")
    return None


def redact_dsn(dsn: str) -> str:
    """The DSN with its password replaced by ``***``; safe to print."""
    if "://" in dsn:
        try:
            parts = urlsplit(dsn)
        except ValueError:
            return "<unparsable connection string>"
        if parts.password is None:
            return dsn
        netloc = parts.netloc.replace(f":{parts.password}@", f":{MASK}@", 1)
        return parts._replace(netloc=netloc).geturl()
    out = []
    for part in dsn.split():
        key, sep, _ = part.partition("=")
        out.append(f"{key}={MASK}" if sep and key.strip() == "password" else part)
    return " ".join(out)


def scrub(text: str, *secrets: str | None) -> str:
    """Remove every given secret (and its URL-quoted form) from a message."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text
