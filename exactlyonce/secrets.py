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
    """The DSN with its password replaced by ``***``, in a URL's user part and in its query
    string (``?password=``, ``?sslpassword=``: any key :func:`is_secret_key` names); safe to
    print."""
    if "://" in dsn:
        try:
            parts = urlsplit(dsn)
        except ValueError:
            return "<unparsable connection string>"
        netloc, query = parts.netloc, _redact_query(parts.query)
        if parts.password is not None:
            netloc = netloc.replace(f":{parts.password}@", f":{MASK}@", 1)
        if (netloc, query) == (parts.netloc, parts.query):
            return dsn
        return parts._replace(netloc=netloc, query=query).geturl()
    out = []
    for part in dsn.split():
        key, sep, _ = part.partition("=")
        out.append(f"{key}={MASK}" if sep and key.strip() == "password" else part)
    return " ".join(out)


def _redact_query(query: str) -> str:
    pairs = []
    for pair in query.split("&") if query else []:
        key, sep, _ = pair.partition("=")
        pairs.append(f"{key}={MASK}" if sep and is_secret_key(unquote(key)) else pair)
    return "&".join(pairs)


def scrub(text: str, *secrets: str | None) -> str:
    """Remove every given secret (and its URL-quoted form) from a message."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


# Settings keys whose values are credentials (librdkafka's sasl.password, ssl.key.password,
# sasl.jaas.config, ssl.key.pem; anything named like a secret or token).
_SECRET_KEY_WORDS = ("password", "secret", "sasl.jaas", "key.pem", "token", "api_key")


def is_secret_key(key: str) -> bool:
    """Whether a setting's name says its value is a credential: THE rule, used everywhere."""
    lowered = key.lower()
    return any(word in lowered for word in _SECRET_KEY_WORDS)


def secret_values(settings: object) -> list[str]:
    """Every value in ``settings`` that must never be printed: the one function that decides.

    ``settings`` is a config object (a pydantic model), a mapping, a list or a value. Secret
    values are: pydantic ``SecretStr`` fields and :class:`Secret` values, with the password
    inside a URL or key=value DSN as well; and anything under a key :func:`is_secret_key`
    names. The result is what :func:`scrub` takes.
    """
    found: list[str] = []
    _collect(settings, found, secret=False)
    return [s for s in dict.fromkeys(found) if s]


def _collect(value: object, found: list[str], secret: bool) -> None:
    reveal = getattr(value, "get_secret_value", None) or getattr(value, "reveal", None)
    if callable(reveal):
        text = str(reveal())
        found.extend([text, dsn_password(text) or ""])
        return
    fields = getattr(type(value), "model_fields", None)
    if isinstance(fields, dict):
        for name in fields:
            _collect(getattr(value, name), found, secret or is_secret_key(name))
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect(item, found, secret or is_secret_key(str(key)))
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, found, secret)
    elif secret and value not in (None, "", False):
        found.append(str(value))
