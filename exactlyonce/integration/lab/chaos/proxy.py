"""The fault proxy in front of the sink's server, for ``exactlyonce chaos``'s ``lost_reply``,
``refuse`` and ``stall`` faults.

:func:`sink_proxy` starts a :class:`~exactlyonce.integration.lab.fault_proxy.FaultProxy` to the
sink's server (PostgreSQL, Redis or Elasticsearch; a Kafka sink's clients talk to the brokers
the cluster advertises, past any proxy, and a TLS address hides the requests, so those are
skipped, with the reason) and gives the sink's address rewritten to it: the runs and the
drainer are given that address, chaos's own reads of the head and the audit go to the server
directly. The rewritten address is passed in the runs' environment, never printed or written.

Each fault is counted as happened only when the proxy says it fired: a reply dropped, a
connection refused, a reply held.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from exactlyonce.connectors import registry
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.lab.chaos.control.clients import control_commit_request
from exactlyonce.integration.lab.chaos.schedule import LOST_REPLY, REFUSE, Fault
from exactlyonce.integration.lab.fault_proxy import FaultProxy

FIRE_TIMEOUT_S = 60.0  # for a fault to fire while the run goes on
POLL_S = 0.1


@dataclass
class SinkProxy:
    """A running proxy to the sink's server and the sink's address through it."""

    proxy: FaultProxy
    commit_request: bytes  # after which the sink's write is applied: the reply to lose
    protocol: str  # the plain client the negative control writes with
    upstream: str  # host:port, for the output
    address: str  # the sink's address through the proxy (may hold credentials)
    control: bool = False  # the negative control's runs go through it (its commit request)

    def stop(self) -> None:
        self.proxy.stop()

    def inject(self, fault: Fault, alive: Callable[[], bool]) -> tuple[bool, str]:
        """Carry out a proxy fault while ``alive()``; (happened, what the proxy saw)."""
        if fault.kind == LOST_REPLY:
            return self._lost_reply(alive)
        if fault.kind == REFUSE:
            return self._refuse(fault.down_s, alive)
        return self._stall(fault.down_s, alive)

    def _lost_reply(self, alive: Callable[[], bool]) -> tuple[bool, str]:
        pattern = control_commit_request(self.protocol) if self.control else self.commit_request
        before = len(self.proxy.dropped)
        self.proxy.drop_reply_to(pattern)
        fired = _until(lambda: len(self.proxy.dropped) > before, alive, FIRE_TIMEOUT_S)
        self.proxy.drop_reply_to(pattern, times=0)  # disarmed, fired or not
        if not fired:
            return False, f"no {pattern.decode()} went through the proxy while the run lived"
        dropped = self.proxy.dropped[-1]
        return True, (
            f"the proxy lost the reply ({dropped.reply_bytes} bytes) to a "
            f"{pattern.decode()} the server applied, and cut that connection"
        )

    def _refuse(self, seconds: float, alive: Callable[[], bool]) -> tuple[bool, str]:
        """Refuse new connections and cut the open ones for ``seconds``, and on until one
        connection was refused (or the run ended); it happened if a connection was cut or
        refused."""
        before = self.proxy.refused
        self.proxy.refuse(True)
        try:
            cut = self.proxy.cut_open() // 2
            time.sleep(seconds)
            fired = _until(lambda: self.proxy.refused > before, alive, FIRE_TIMEOUT_S)
        finally:
            self.proxy.refuse(False)
        refused = self.proxy.refused - before
        note = f"the proxy cut {cut} open connection(s) and refused {refused} new one(s)"
        if fired or cut:
            return True, note
        return False, f"{note}: none open or tried while the run lived"

    def _stall(self, seconds: float, alive: Callable[[], bool]) -> tuple[bool, str]:
        """Hold every reply ``seconds``, again until one reply was held."""
        before = self.proxy.stalled

        def held() -> bool:
            if self.proxy.stalled > before:
                return True
            self.proxy.hold_replies(seconds)
            return False

        fired = _until(held, alive, FIRE_TIMEOUT_S)
        time.sleep(seconds)  # the held replies go on after this
        stalled = self.proxy.stalled - before
        note = f"the proxy held {stalled} repl{'y' if stalled == 1 else 'ies'} {seconds:.1f} s"
        return fired, note if fired else "no reply came through the proxy while the run lived"


def _until(done: Callable[[], bool], alive: Callable[[], bool], timeout: float) -> bool:
    """Poll ``done`` until it is true (True), or the run ended or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while not done():
        if not alive() or time.monotonic() > deadline:
            return done()
        time.sleep(POLL_S)
    return True


def sink_proxy(cfg: PipelineConfig) -> tuple[SinkProxy | None, str]:
    """A proxy to ``cfg``'s sink server, or None and why it has none."""
    sink = cfg.sink
    chaos = registry.kind_of(sink).chaos
    refusal = chaos.proxy_refusal(sink)
    if refusal is not None:
        return None, refusal
    address = chaos.addresses(sink)[0]
    host, port = _host_port(address, chaos.default_port)
    if host is None:
        return None, "the sink's address uses TLS or cannot be parsed"
    if chaos.commit_request is None:
        return None, "the sink names no request after which its write is applied"
    proxy = FaultProxy(host, port)
    through = proxied_address(address, proxy.port)
    made = SinkProxy(proxy, chaos.commit_request, chaos.protocol, f"{host}:{port}", through)
    return made, ""


def _host_port(address: str, default_port: int) -> tuple[str | None, int]:
    """The server's host and port, or (None, 0) for a TLS or unparsable address."""
    if "://" not in address and "=" in address:  # a libpq key=value DSN
        fields = dict(p.split("=", 1) for p in address.split() if "=" in p)
        if fields.get("sslmode", "") in ("require", "verify-ca", "verify-full"):
            return None, 0
        return fields.get("host", "localhost"), int(fields.get("port", default_port))
    parts = urlsplit(address if "://" in address else f"//{address}")
    if parts.scheme in ("rediss", "https") or "sslmode=require" in parts.query:
        return None, 0
    try:
        return parts.hostname or "localhost", parts.port or default_port
    except ValueError:
        return None, 0


def proxied_address(address: str, port: int) -> str:
    """``address`` (a URL, ``host:port`` or libpq DSN) with its host and port replaced by
    ``127.0.0.1:port``; its user, password, database and options kept."""
    if "://" not in address and "=" in address:
        kept = [p for p in address.split() if not p.startswith(("host=", "port=", "hostaddr="))]
        return " ".join([*kept, "host=127.0.0.1", f"port={port}"])
    had_scheme = "://" in address
    parts = urlsplit(address if had_scheme else f"//{address}")
    user = parts.netloc.rpartition("@")[0]
    netloc = f"{user}@127.0.0.1:{port}" if user else f"127.0.0.1:{port}"
    rebuilt = urlunsplit(parts._replace(netloc=netloc))
    return rebuilt if had_scheme else rebuilt.removeprefix("//")
