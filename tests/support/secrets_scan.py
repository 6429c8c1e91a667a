"""No credential in any log, output or file a run leaves (DESIGN invariant 8): one scanner.

:func:`assert_no_secrets` searches every file under the given paths (the driver's and the
executors' logs, Spark's event log, checkpoints, reports) and texts given directly (a
command's stdout and stderr) for every secret, in every form a log may carry it
(:func:`secret_forms`): as it is; URL-quoted (``quote(safe="")``, ``quote``, ``quote_plus``,
either hex case); escaped as JSON, a Python repr or a libpq keyword value writes it; base64,
standard and URL-safe, also inside a longer base64 text (``Basic dXNlcjpwdw==``).

Guarantees: a scan fails when it was given no secret, or found nothing to search (no
non-empty file or text): a scan of nothing proves nothing. It fails on a compressed file it
cannot read (Spark's event log: :func:`event_log_conf` turns its compression off) rather
than pass over it. A failure names the file, the secret's
number and its form, never the secret.
"""

from __future__ import annotations

import base64
import fnmatch
import gzip
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, urlsplit

# Compressed files this scanner cannot read (Spark's event-log codecs): refused, not skipped.
UNREADABLE = (".zstd", ".zst", ".lz4", ".snappy", ".lzf")
# A base64 run shorter than this could match by chance.
MIN_BASE64 = 6


def event_log_conf(directory: Path) -> dict[str, str]:
    """Spark settings that write the event log, uncompressed (so it can be scanned), into
    ``directory`` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": directory.resolve().as_uri(),
        "spark.eventLog.compress": "false",
    }


def url_passwords(*urls: str | None) -> list[str]:
    """The passwords (unquoted) of the URLs that have one."""
    found = []
    for url in urls:
        password = urlsplit(url or "").password
        if password:
            found.append(unquote(password))
    return found


def secret_forms(secret: str) -> dict[str, bytes]:
    """Form name -> the bytes a log carries ``secret`` as (see the module docstring)."""
    forms: dict[str, str] = {
        "raw": secret,
        "URL-quoted": quote(secret, safe=""),
        "URL-quoted, '/' kept": quote(secret),
        "URL-quoted, '+' for space": quote_plus(secret),
        "JSON-escaped": json.dumps(secret)[1:-1],
        "repr-escaped": repr(secret)[1:-1],
        "libpq-escaped": secret.replace("\\", "\\\\").replace("'", "\\'"),
    }
    for name, text in list(forms.items()):
        if name.startswith("URL"):
            forms[f"{name}, lower-case hex"] = re.sub(r"%[0-9A-F]{2}", _lower, text)
    encoded = {name: text.encode() for name, text in forms.items()}
    encoded.update(_base64_forms(secret.encode()))
    first_names: dict[bytes, str] = {}
    for name, form in encoded.items():
        first_names.setdefault(form, name)  # one name per distinct form
    return {name: form for form, name in first_names.items()}


def _forms(secret: str) -> list[tuple[str, bytes]]:
    return list(secret_forms(secret).items())


def _lower(match: re.Match[str]) -> str:
    return match.group(0).lower()


def _base64_forms(data: bytes) -> dict[str, bytes]:
    """The base64 characters that depend on ``data`` alone, at each of the 3 byte offsets it
    may start at inside a longer text (so ``user:pw`` encoded whole is caught too)."""
    forms: dict[str, bytes] = {}
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data)
        first = (0, 2, 3)[offset]  # the characters the leading bytes touch
        last = (offset + len(data)) * 8 // 6  # the characters complete within data
        core = encoded[first:last]
        if len(core) >= MIN_BASE64:
            forms[f"base64 (offset {offset})"] = core
            forms[f"URL-safe base64 (offset {offset})"] = core.translate(
                bytes.maketrans(b"+/", b"-_")
            )
    return forms


@dataclass
class Scanned:
    """What a scan searched: non-empty files and texts, and their bytes."""

    files: list[Path] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    size: int = 0

    def names(self) -> list[str]:
        return [p.name for p in self.files]


@dataclass(frozen=True)
class Leak:
    where: str
    secret: int
    form: str
    line: int

    def __str__(self) -> str:
        return f"{self.where}:{self.line} shows secret #{self.secret} ({self.form})"


def assert_no_secrets(
    paths: Iterable[Path],
    secrets: Iterable[str | None],
    *,
    texts: Mapping[str, str] | None = None,
    expect: Iterable[str] = (),
) -> Scanned:
    """Search every file under ``paths`` and every text in ``texts`` (name -> text) for
    every form of every secret; fail on the first leaks found, naming them. ``expect``:
    file-name patterns (``"run-*.log"``, ``"events_*"``) each of which a non-empty scanned
    file must match (an event log that was never written fails). Returns what was scanned."""
    paths, wanted = list(paths), [s for s in secrets if s]
    assert wanted, "no secret to look for: the scan would prove nothing"
    forms = [(n, name, form) for n, s in enumerate(wanted) for name, form in _forms(s)]
    scanned, leaks = _scan_files(paths, forms)
    for name, text in (texts or {}).items():
        if text:
            scanned.texts.append(name)
            scanned.size += len(text)
            leaks += _leaks(name, text.encode(), forms)
    assert scanned.size, f"nothing to scan under {[str(p) for p in paths]}: a scan of nothing"
    missing = [p for p in expect if not fnmatch.filter(scanned.names(), p)]
    assert not missing, f"no non-empty file matches {missing}; scanned {scanned.names()}"
    assert not leaks, "credentials leaked:\n" + "\n".join(str(leak) for leak in leaks[:20])
    return scanned


def _scan_files(
    paths: list[Path], forms: list[tuple[int, str, bytes]], attempts: int = 20
) -> tuple[Scanned, list[Leak]]:
    """Every file under ``paths``, scanned; again from the start when one vanished while
    scanned (a process still renaming its logs: Spark's ``.inprogress`` event log)."""
    for _ in range(attempts):
        scanned, leaks = Scanned(), []
        try:
            for path in _files(paths):
                data = _read(path)
                if data:
                    scanned.files.append(path)
                    scanned.size += len(data)
                    leaks += _leaks(str(path), data, forms)
        except FileNotFoundError:
            time.sleep(0.5)
            continue
        return scanned, leaks
    raise AssertionError(f"files under {[str(p) for p in paths]} kept vanishing while scanned")


def _files(paths: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            found.append(path)
    return found


def _read(path: Path) -> bytes:
    assert not path.name.endswith(UNREADABLE), (
        f"{path} is compressed: it cannot be scanned (spark.eventLog.compress=false)"
    )
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def _leaks(where: str, data: bytes, forms: list[tuple[int, str, bytes]]) -> list[Leak]:
    leaks = []
    for n, name, form in forms:
        at = data.find(form)
        if at >= 0:
            leaks.append(Leak(where, n, name, data.count(b"\n", 0, at) + 1))
    return leaks
