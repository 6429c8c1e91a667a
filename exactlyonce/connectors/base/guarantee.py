"""What ``exactlyonce check`` reports for a sink: the guarantee it gives, the one mechanism it
rests on, and each precondition of that guarantee checked live against the services.

Each sink says its own part (:meth:`ExactlyOnceSink.guarantee` and
:meth:`ExactlyOnceSink.preconditions`); this module holds the report's shape, the rule that
turns an unreachable service or a refusal into a failing check (never a stack trace), and
the checks every sink shares: the head against the Spark checkpoint, the trigger interval.

Statuses: ``ok``; ``warning`` (the guarantee holds, with a caveat worth knowing); ``failing``
(the guarantee does not hold, or the start would refuse): the command exits 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from exactlyonce.connectors.base.head import Head
from exactlyonce.errors import ConfigError, ExactlyOnceError, SinkUnavailableError
from exactlyonce.secrets import scrub

Status = Literal["ok", "warning", "failing"]
OK: Status = "ok"
WARNING: Status = "warning"
FAILING: Status = "failing"

UNREACHABLE_FIX = "start the service, or correct its address and credentials in the sink's config"


@dataclass(frozen=True)
class Check:
    """One precondition, checked live: what it is, what was found, and the fix."""

    name: str
    status: Status
    detail: str
    fix: str | None = None


@dataclass(frozen=True)
class Guarantee:
    """What the sink promises (``EXACTLY ONCE``...) and the mechanism it rests on."""

    name: str
    mechanism: str


@dataclass
class GuaranteeReport:
    """A sink's guarantee and its checked preconditions; ``parts`` for a sink behind a buffer
    (the drain into the real sink, its dead letters)."""

    sink: str
    guarantee: Guarantee
    checks: list[Check] = field(default_factory=list)
    parts: list[GuaranteeReport] = field(default_factory=list)

    def all_checks(self) -> list[Check]:
        return [*self.checks, *(c for part in self.parts for c in part.all_checks())]

    @property
    def failing(self) -> bool:
        return any(c.status == FAILING for c in self.all_checks())

    def counts(self) -> dict[str, int]:
        statuses = [c.status for c in self.all_checks()]
        return {s: statuses.count(s) for s in (OK, WARNING, FAILING)}

    def as_dict(self) -> dict[str, Any]:
        return {
            "sink": self.sink,
            "guarantee": self.guarantee.name,
            "mechanism": self.guarantee.mechanism,
            "checks": [c.__dict__ for c in self.checks],
            "parts": [p.as_dict() for p in self.parts],
        }

    def lines(self, indent: str = "") -> list[str]:
        out = [
            f"{indent}{self.sink}",
            f"{indent}  guarantee: {self.guarantee.name}",
            f"{indent}  mechanism: {self.guarantee.mechanism}",
        ]
        for check in self.checks:
            out.append(
                f"{indent}  [{check.status}]{' ' * (8 - len(check.status))}"
                f"{check.name}: {check.detail}"
            )
            if check.fix and check.status != OK:
                out.append(f"{indent}             fix: {check.fix}")
        for part in self.parts:
            out.extend(part.lines(indent + "  "))
        return out

    def scrubbed(self, secrets: Sequence[str]) -> GuaranteeReport:
        """The report with every secret masked (a foreign error message may quote one)."""

        def clean(text: str | None) -> str | None:
            return None if text is None else scrub(text, *secrets)

        return GuaranteeReport(
            self.sink,
            self.guarantee,
            [Check(c.name, c.status, clean(c.detail) or "", clean(c.fix)) for c in self.checks],
            [p.scrubbed(secrets) for p in self.parts],
        )


class SinkCheck(Protocol):
    """What ``exactlyonce check`` asks of a sink (its ``check()``): read-only, may connect."""

    def guarantee(self) -> Guarantee:
        """The guarantee in the sink's mode and the mechanism it rests on (one sentence
        each, as the sink's class docstring says)."""
        ...

    def preconditions(self) -> list[Check]:
        """Each precondition of the guarantee, checked live and WITHOUT side effects (nothing
        created, nothing written): ok, warning or failing, with the fix."""
        ...


SinkT = TypeVar("SinkT")


@dataclass(frozen=True)
class CheckOf(Generic[SinkT]):
    """A :class:`SinkCheck` made of a sink's check functions (its ``check`` module)."""

    sink: SinkT
    guarantee_of: Callable[[SinkT], Guarantee]
    preconditions_of: Callable[[SinkT], list[Check]]

    def guarantee(self) -> Guarantee:
        return self.guarantee_of(self.sink)

    def preconditions(self) -> list[Check]:
        return self.preconditions_of(self.sink)


def checked(name: str, run: Callable[[], Check | Iterable[Check]]) -> list[Check]:
    """Run one live check. An unreachable service, a refusal (ConfigError) or any other
    error becomes ONE failing check named ``name`` with its fix, never a traceback."""
    try:
        result = run()
    except SinkUnavailableError as exc:
        return [Check(name, FAILING, str(exc), UNREACHABLE_FIX)]
    except ConfigError as exc:
        return [Check(name, FAILING, exc.reason, f"change `{exc.field}` (see the detail)")]
    except ExactlyOnceError as exc:
        return [Check(name, FAILING, str(exc), "see the detail")]
    except Exception as exc:  # a driver error we do not classify: report it, never raise
        return [Check(name, FAILING, f"{type(exc).__name__}: {exc}", "see the detail")]
    return [result] if isinstance(result, Check) else list(result)


def absent(what: str, created_by: str, *, create_now: bool = True) -> Check:
    """Something the sink creates itself is missing: fine, and the report says when (and
    whether ``check --create`` can create it now)."""
    now = " (or now: `exactlyonce check --create`)" if create_now else ""
    return Check(what, OK, f"absent; {created_by}{now}")


def head_check(head: Head | None, checkpoint_id: str | None, checkpoint_known: bool) -> Check:
    """Does the sink head belong to the Spark checkpoint (DESIGN invariant 9)?

    ``checkpoint_id`` is the id in the checkpoint's ``metadata`` file (None: no checkpoint
    yet); ``checkpoint_known`` is False when the pipeline names no readable checkpoint.
    """
    name = "head and checkpoint"
    if not checkpoint_known:
        where = "no head yet" if head is None else f"head at epoch {head.epoch}"
        return Check(name, OK, f"{where}; checkpoint not readable here, not compared")
    if head is None:
        if checkpoint_id is None:
            return Check(name, OK, "new query: no head and no checkpoint yet")
        return Check(
            name,
            WARNING,
            f"the checkpoint (Spark query {checkpoint_id}) has no head in the sink (reset, or "
            "never committed): the next start writes from the checkpoint's next batch on",
            "expected after `exactlyonce reset-head`; otherwise check the sink's names",
        )
    if head.spark_query_id is None or head.spark_query_id == checkpoint_id:
        bound = "not bound yet" if head.spark_query_id is None else "same Spark query"
        return Check(name, OK, f"head at epoch {head.epoch}, {bound} as the checkpoint")
    found = (
        "no checkpoint" if checkpoint_id is None else f"checkpoint of Spark query {checkpoint_id}"
    )
    return Check(
        name,
        FAILING,
        f"the head (epoch {head.epoch}) was written by Spark query {head.spark_query_id}, "
        f"but the pipeline has {found}: the start would refuse (a new checkpoint restarts "
        "at batch 0 and would skip every epoch as committed)",
        "restore the checkpoint, use a new query_name, or `exactlyonce reset-head` to start "
        "over on purpose",
    )


def trigger_check(check_trigger: Callable[[float | None], None], interval_s: float | None) -> Check:
    """The sink's own trigger rule (:meth:`ExactlyOnceSink.check_trigger`) as a check."""
    name = "trigger interval"
    shown = "no processing-time trigger" if interval_s is None else f"{interval_s:g} s"
    try:
        check_trigger(interval_s)
    except ConfigError as exc:
        return Check(name, FAILING, exc.reason, f"change `{exc.field}` or the trigger")
    return Check(name, OK, f"{shown}: the sink can serve it")
