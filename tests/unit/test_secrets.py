"""One rule decides what is secret, for config objects, mappings and values alike."""

from __future__ import annotations

import json
import re
from urllib.parse import quote, quote_plus

import pytest
from pydantic import BaseModel, SecretStr

from exactlyonce.secrets import (
    MASK,
    Secret,
    credentials,
    dsn_password,
    is_secret_key,
    redact_dsn,
    scrub,
    secret_values,
)


class Settings(BaseModel):
    dsn: SecretStr
    host: str
    client_config: dict[str, object] = {}


def test_secret_fields_urls_and_secret_keys_are_found() -> None:
    settings = Settings(
        dsn=SecretStr("postgresql://app:pw-1@db/app"),
        host="db",
        client_config={"sasl.password": "pw-2", "sasl.username": "me", "acks": "all"},
    )
    found = secret_values(settings)
    assert "postgresql://app:pw-1@db/app" in found and "pw-1" in found and "pw-2" in found
    assert "me" not in found and "db" not in found and "all" not in found
    assert "pw-1" not in scrub("failed: pw-1 at db", *found)


def test_nested_secrets_and_the_key_rule() -> None:
    assert secret_values({"api_key": "k-1", "nested": {"token": "t-2"}, "x": Secret("s-3")}) == [
        "k-1",
        "t-2",
        "s-3",
    ]
    assert is_secret_key("ssl.key.password") and is_secret_key("sasl.jaas.config")
    assert not is_secret_key("bootstrap.servers")


# Passwords with every character URLs, libpq and JSON write differently.
PASSWORDS = ["p@ss", "a/b+c d", "q'uo\"te\\", "pässwörd", "100%sure", "x&y=z?#:"]


def _libpq_quoted(password: str) -> str:
    """A libpq keyword value in single quotes (backslash and quote escaped)."""
    return "'" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _encodings(password: str) -> dict[str, str]:
    """The password as URLs, libpq, JSON and Python write it."""
    url_quoted = quote(password, safe="")
    return {
        "raw": password,
        "quote, safe=''": url_quoted,
        "quote, default safe": quote(password),
        "quote_plus": quote_plus(password),
        "lower-case hex": re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), url_quoted),
        "libpq keyword": _libpq_quoted(password)[1:-1],
        "JSON": json.dumps(password)[1:-1],
        "JSON, non-ASCII kept": json.dumps(password, ensure_ascii=False)[1:-1],
        "Python repr": repr(password)[1:-1],
    }


def _forms(password: str) -> dict[str, str]:
    """Every way a message may carry the password: its encodings, and the settings around
    them."""
    url_quoted = quote(password, safe="")
    return {
        **_encodings(password),
        "URL user part": f"postgresql://u:{url_quoted}@host/db",
        "URL query string": f"postgresql://u@host/db?password={quote_plus(password)}",
        "libpq keyword, single quotes": f"host=h password={_libpq_quoted(password)} dbname=d",
        "keyword, double quotes": f'password="{password}"',
        "JSON object": json.dumps({"password": password}),
        "JSON object, non-ASCII kept": json.dumps({"password": password}, ensure_ascii=False),
        "Python repr": repr({"password": password}),
    }


@pytest.mark.parametrize("password", PASSWORDS)
def test_scrub_removes_every_quoted_form_of_a_password(password: str) -> None:
    for name, form in _forms(password).items():
        shown = scrub(f"connect failed: <{form}> at host", password)
        assert MASK in shown, name
        assert shown.startswith("connect failed: <") and shown.endswith("> at host"), name
        leaked = [e for e in _encodings(password).values() if e in shown]
        assert not leaked, (name, shown)


@pytest.mark.parametrize("password", PASSWORDS)
def test_the_password_of_every_dsn_form_is_found(password: str) -> None:
    url = f"postgresql://u:{quote(password, safe='')}@host/db"
    keyword = f"host=h password={_libpq_quoted(password)} dbname=d"
    assert dsn_password(url) == password
    assert dsn_password(keyword) == password
    assert dsn_password(f"host=h password = {_libpq_quoted(password)}") == password
    for dsn in (url, keyword):
        shown = redact_dsn(dsn)
        assert scrub(shown, password) == shown, shown
        assert "host" in shown and MASK in shown


def test_scrub_replaces_a_whole_dsn_before_its_password() -> None:
    dsn = "postgresql://u:p%40ss@host/db"
    assert scrub(f"bad {dsn}!", "p@ss", dsn) == f"bad {MASK}!"


def test_scrub_leaves_text_without_the_secret_alone() -> None:
    assert scrub("p-ss and p%41ss", "p@ss", None, "") == "p-ss and p%41ss"


def test_a_url_password_is_found_in_any_setting_and_in_a_dataclass() -> None:
    from exactlyonce.dedup.catalog import DedupConfig

    settings = {
        "hosts": ["https://user:host-pw@es:9200"],
        "dedup": DedupConfig(redis_url="redis://:catalog%2Fpw@catalog:6379/0"),
    }
    found = secret_values(settings)
    assert "host-pw" in found and "catalog/pw" in found
    assert "https://user:host-pw@es:9200" not in found  # the URL itself is no credential


def test_credentials_leave_out_connection_strings_without_a_password() -> None:
    values = {
        "dsn": SecretStr("postgresql://app@db/app"),
        "keyword": SecretStr("host=db dbname=app"),
        "with_pw": SecretStr("postgresql://app:pw-1@db/app"),
        "api_key": "a2V5Cg==",
    }
    assert credentials(values) == ["postgresql://app:pw-1@db/app", "pw-1", "a2V5Cg=="]
