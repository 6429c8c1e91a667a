"""The soak across several sittings: which code a cell ran, which cells are done, what is left.

A full soak (5 sinks x 5 seeds of 20 kills over 100,000 IDs, plus a 300 s run per sink) takes
longer than one working session. Each cell (one chaos run) is written to the results file as
soon as it ends, with the **fingerprint** of the code it ran (a hash of every source file of
the ``exactlyonce`` package and of the soak's own files) and its date. A later ``make soak``
of the same code skips the cells already done with the same parameters and runs the rest, so
the matrix can be completed piece by piece from one version of the code. Cells of another
fingerprint (or other parameters) are kept in the file, listed as stale, and never summed
into the matrix. A cell that FAILED counts as done (its failure is the result); ``--redo``
runs selected cells again, keeping the replaced entries as superseded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = "exactlyonce"
SOAK_FILES = (
    "bench/soak.py",
    "bench/soak_input.py",
    "bench/soak_report.py",
    "bench/soak_resume.py",
    "bench/soak_servers.py",
    # the Elasticsearch cell's stand-in and the OpenSearch cell's node are the package's
    # services (the stand-in, the node's pom, main class and module are in the package,
    # fingerprinted as PACKAGE)
)
SOAK_GLOBS = ("examples/soak/*.yaml",)
FINGERPRINT_CHARS = 16

CellKey = tuple[str, int, str]  # (sink, seed, mode)
Wanted = Callable[[CellKey], dict[str, Any]]  # the parameters a cell must have run with


def fingerprint_files(root: Path) -> list[Path]:
    """The files the fingerprint covers, relative to ``root``, sorted."""
    package = [
        p.relative_to(root)
        for p in (root / PACKAGE).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    ]
    own = [Path(f) for f in SOAK_FILES if (root / f).is_file()]
    own += [p.relative_to(root) for g in SOAK_GLOBS for p in root.glob(g) if p.is_file()]
    return sorted(set(package + own))


def code_fingerprint(root: Path) -> str:
    """sha256 over each covered file's path and bytes: the same code gives the same value."""
    digest = hashlib.sha256()
    for rel in fingerprint_files(root):
        digest.update(rel.as_posix().encode() + b"\0")
        digest.update((root / rel).read_bytes() + b"\0")
    return digest.hexdigest()[:FINGERPRINT_CHARS]


def cell_parameters(
    mode: str,
    events: int,
    kills: int,
    replay_fraction: float,
    duration: float,
    *,
    restarts: int = 4,
    proxy_faults: int = 3,
    cluster: bool = False,
    worker_kills: int = 0,
) -> dict[str, Any]:
    """What must match for an earlier cell to stand for this one (beside sink, seed, mode):
    among them whether it ran on the standalone ``cluster`` and its ``worker_kills``."""
    return {
        "events": events,
        "kills": kills,
        "replay_fraction": replay_fraction,
        "duration": duration if mode == "duration" else None,
        "server_restarts": restarts,
        "proxy_faults": proxy_faults,
        "cluster": cluster,
        "worker_kills": worker_kills,
    }


def key_of(cell: dict[str, Any]) -> CellKey:
    return (str(cell.get("sink")), int(cell.get("seed") or 0), str(cell.get("mode")))


@dataclass
class Ledger:
    """The cells of the results file, sorted into those of this code and these parameters
    (``current``) and the others (``stale``, each with why it is not in the matrix)."""

    fingerprint: str
    current: list[dict[str, Any]] = field(default_factory=list)
    stale: list[dict[str, Any]] = field(default_factory=list)

    def sort_in(self, cells: Iterable[dict[str, Any]], wanted: Wanted) -> None:
        """File each earlier cell; ``wanted`` gives the parameters this soak runs a cell
        (its key) with."""
        for cell in cells:
            why = self._why_stale(cell, wanted)
            if why:
                self.stale.append({**cell, "stale": why})
            else:
                self.current.append(cell)

    def _why_stale(self, cell: dict[str, Any], wanted: Wanted) -> str:
        if cell.get("stale"):
            return str(cell["stale"])
        theirs = cell.get("fingerprint")
        if theirs is None:
            return "run before cells recorded their code fingerprint"
        if theirs != self.fingerprint:
            return f"code fingerprint {theirs}, not {self.fingerprint}"
        if cell.get("params") != wanted(key_of(cell)):
            return f"other parameters {cell.get('params')}"
        return ""

    def done(self, key: CellKey) -> dict[str, Any] | None:
        return next((c for c in self.current if key_of(c) == key), None)

    def supersede(self, key: CellKey, date: str) -> None:
        """Move this code's cell ``key`` (about to run again under ``--redo``) to stale."""
        old = self.done(key)
        if old is not None:
            self.current.remove(old)
            self.stale.append({**old, "stale": f"superseded by --redo on {date}"})

    def add(self, cell: dict[str, Any]) -> None:
        self.current.append(cell)


def estimate_left(remaining: Sequence[str], ledger: Ledger) -> float | None:
    """Seconds the ``remaining`` cells (their modes) should take, from the wall time of this
    code's cells done so far (per mode; a duration cell without its own measure counts as a
    seed cell); None before any cell ended."""
    times: dict[str, list[float]] = {"seed": [], "duration": []}
    for cell in ledger.current:
        if cell.get("wall_seconds") is not None:
            times.setdefault(str(cell["mode"]), []).append(float(cell["wall_seconds"]))
    fallback = times["seed"] or times["duration"]
    if not fallback:
        return None
    total = 0.0
    for mode in remaining:
        values = times.get(mode) or fallback
        total += sum(values) / len(values)
    return total


def hours(seconds: float) -> str:
    """``1 h 05 min``."""
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min"
