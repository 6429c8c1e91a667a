"""Credentials that never print.

A :class:`Secret` holds a value (a DSN with a password, an API key) and shows only ``***`` in
``repr``/``str``, so it can sit in config objects, exceptions and logs safely. Messages from
client libraries are passed through :func:`scrub` before they reach ours.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

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


# One ``key=value`` of a libpq keyword connection string: the value bare (backslash
# escapes allowed) or in single quotes (``\'`` and ``\\`` escaped); spaces around ``=``.
_KEYWORD = re.compile(r"(?P<key>[\w.-]+)\s*=\s*(?P<value>'(?:\\.|[^'\\])*'|(?:\\.|[^\s\\])+)")
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)


def _keyword_value(value: str) -> str:
    """A libpq keyword value as the server sees it: quotes off, escapes undone."""
    if len(value) >= 2 and value[0] == value[-1] == "'":
        value = value[1:-1]
    return _ESCAPED.sub(r"\1", value)


def dsn_password(dsn: str) -> str | None:
    """The password in a URL (its user part, else ``?password=``) or a libpq keyword
    connection string (``password=pw``, ``password = 'p w'``), unquoted; ``None`` if none."""
    if "://" in dsn:
        try:
            parts = urlsplit(dsn)
            password = parts.password
        except ValueError:
            return None
        if password:
            return unquote(password)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        return query.get("password") or None
    for match in _KEYWORD.finditer(dsn):
        if match["key"] == "password":
            return _keyword_value(match["value"]) or None
    return None


def redact_dsn(dsn: str) -> str:
    """The DSN with its password replaced by ``***``, in a URL's user part and in its query
    string (``?password=``, ``?sslpassword=``: any key :func:`is_secret_key` names), or in a
    libpq keyword string (``password='p w'``: the whole value, quotes included); safe to
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
    return _KEYWORD.sub(_redact_keyword, dsn)


def _redact_keyword(match: re.Match[str]) -> str:
    return f"{match['key']}={MASK}" if is_secret_key(match["key"]) else match[0]


def _redact_query(query: str) -> str:
    pairs = []
    for pair in query.split("&") if query else []:
        key, sep, _ = pair.partition("=")
        pairs.append(f"{key}={MASK}" if sep and is_secret_key(unquote(key)) else pair)
    return "&".join(pairs)


def scrub(text: str, *secrets: str | None) -> str:
    """Remove every given secret from a message, in every form a message may carry it.

    Guaranteed removed: the secret as it is; URL-quoted, whatever was quoted (``quote``,
    ``quote(safe="")``, ``quote_plus``, a hand-quoted ``p%40ss``; either hex case); and
    backslash-escaped as a libpq keyword value, JSON (``\\u00e9`` too) or a Python repr
    writes it. Each is replaced by ``***``; longer secrets go first, so a whole DSN becomes one
    ``***``. Not guaranteed: a secret cut in two, or encoded otherwise (base64, hashes).
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = _secret_pattern(secret).sub(MASK, text)
    return text


def _secret_pattern(secret: str) -> re.Pattern[str]:
    """A pattern matching ``secret`` in any of :func:`scrub`'s forms, a character at a time."""
    return re.compile("".join(_char_pattern(char) for char in secret))


def _char_pattern(char: str) -> str:
    """One character of a secret: as it is, percent-encoded (its UTF-8 bytes, either hex
    case), ``+`` for a space, or backslash-escaped (libpq, JSON, Python)."""
    forms = {
        char,
        json.dumps(char)[1:-1],
        repr(char)[1:-1],
        ascii(char)[1:-1],
        f"\\{char}" if char in "'\"\\" else char,
        "+" if char == " " else char,
    }
    literal = [re.escape(form) for form in sorted(forms, key=len, reverse=True)]
    percent = "".join(f"%(?i:{byte:02x})" for byte in char.encode("utf-8"))
    return f"(?:{'|'.join([*literal, percent])})"


# Settings keys whose values are credentials (librdkafka's sasl.password, ssl.key.password,
# sasl.jaas.config, ssl.key.pem; anything named like a secret or token).
_SECRET_KEY_WORDS = ("password", "secret", "sasl.jaas", "key.pem", "token", "api_key")


def is_secret_key(key: str) -> bool:
    """Whether a setting's name says its value is a credential: THE rule, used everywhere."""
    lowered = key.lower()
    return any(word in lowered for word in _SECRET_KEY_WORDS)


def secret_values(settings: object) -> list[str]:
    """Every value in ``settings`` that must never be printed: the one function that decides.

    ``settings`` is a config object (a pydantic model or a dataclass), a mapping, a list or a
    value. Secret values are: pydantic ``SecretStr`` fields and :class:`Secret` values, with
    the password inside a URL or key=value DSN as well; the password inside any URL (``hosts:
    [https://u:pw@es]``, a catalog's ``redis://:pw@...``); and anything under a key
    :func:`is_secret_key` names. The result is what :func:`scrub` takes.
    """
    found: list[str] = []
    _collect(settings, found, secret=False)
    return [s for s in dict.fromkeys(found) if s]


def credentials(settings: object) -> list[str]:
    """The credentials in ``settings``: :func:`secret_values` without connection strings
    that carry no password (``postgresql://app@db/app``: a name and an address, which need
    not be hidden from Spark's plans; their passwords, when they have one, are in)."""
    return [value for value in secret_values(settings) if not _bare_connection_string(value)]


def _bare_connection_string(value: str) -> bool:
    keyword_pairs = len(_KEYWORD.findall(value))
    keyword = keyword_pairs >= 2 and not _KEYWORD.sub("", value).strip()
    return ("://" in value or keyword) and dsn_password(value) is None


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
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _collect(getattr(value, field.name), found, secret or is_secret_key(field.name))
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect(item, found, secret or is_secret_key(str(key)))
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, found, secret)
    elif secret and value not in (None, "", False):
        found.append(str(value))
    elif isinstance(value, str) and "://" in value:
        found.append(dsn_password(value) or "")
