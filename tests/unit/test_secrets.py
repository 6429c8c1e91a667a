"""One rule decides what is secret, for config objects, mappings and values alike."""

from __future__ import annotations

from pydantic import BaseModel, SecretStr

from exactlyonce.secrets import Secret, is_secret_key, scrub, secret_values


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
