"""A host gone silent told from a slow one in seconds, on a connection already open.

A host that lost power or its link sends no TCP reset: a request on an open SSH connection just gets no
answer, and waited out its whole ``io_timeout`` (30 s) before the client failed over. A busy host (a slow
disk, a big file, an SFTP server that stalls) must not be taken for gone though. So a request watched here
(``with watched(transport, where) as watch:``) that has not ended within ``probe_after`` seconds has its
connection asked whether the host lives: an SSH keepalive (``keepalive@openssh.com`` with a reply wanted;
OpenSSH's sshd answers it from its own loop, whatever its SFTP server or the command is doing, as it does
``ServerAliveInterval``). An answer within ``answer_within`` seconds keeps the request waiting (it is asked
again every ``probe_after`` while it waits, up to its own timeout as before); no answer closes the
connection, which ends the blocked request at once, and ``watched`` raises ``SSHError`` (code
``unreachable``) naming ``host:port``: the share then fails over to the next host, a command says the
node is gone. The request's own timeout (``io_timeout``, a caller's ``io_deadline``) still holds.

One daemon thread times every watch; each probe runs on a short thread of its own, one at a time per
connection (paramiko's ``global_request`` keeps one reply slot per transport).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import paramiko

from ..exceptions import SSHError

PROBE_AFTER = 2.5  # seconds a request waits before its connection is asked whether the host lives
ANSWER_WITHIN = 3.0  # seconds a live host's sshd has to answer that keepalive
KEEPALIVE = "keepalive@openssh.com"  # what OpenSSH's own client sends (ServerAliveInterval)


class Watch:
    """One watched request: ``silent`` says why its host was taken for gone (None while it answers)."""

    def __init__(self, transport: paramiko.Transport, where: str, probe_after: float, answer_within: float):
        self.transport = transport
        self.where = where
        self.probe_after = probe_after
        self.answer_within = answer_within
        self.started = time.monotonic()
        self.due = self.started + probe_after
        self.silent: str | None = None
        self.probes = 0  # keepalives answered while the request waited
        self.active = True

    def error(self) -> SSHError:
        """The error of a request whose host was taken for gone: ``where``, why, how long it waited."""
        waited = time.monotonic() - self.started
        return SSHError(
            self.where, f"the host stopped answering: {self.silent} (the request waited {waited:.1f} s)",
            code="unreachable",
        )  # fmt: skip


class _Watchdog:
    """Times the watches; asks each connection whose request is due, one probe per connection at once."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._probing: set[int] = set()  # id() of the transports being asked now
        self._thread: threading.Thread | None = None

    def add(self, watch: Watch) -> None:
        with self._cond:
            sooner = not self._heap or watch.due < self._heap[0][0]
            heapq.heappush(self._heap, (watch.due, next(self._order), watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="batchai-liveness", daemon=True)
                self._thread.start()
            if sooner:  # else the thread wakes for an earlier one anyway: no wake-up per request
                self._cond.notify()

    def remove(self, watch: Watch) -> None:
        with self._cond:
            watch.active = False  # dropped from the heap when it comes up

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and not self._heap[0][2].active:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                due, _, watch = self._heap[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                key = id(watch.transport)
                if key in self._probing:  # its connection is being asked already: see again after that
                    watch.due = time.monotonic() + min(watch.probe_after, watch.answer_within) / 4
                    heapq.heappush(self._heap, (watch.due, next(self._order), watch))
                    continue
                self._probing.add(key)
            threading.Thread(target=self._probe, args=(watch,), name="batchai-keepalive", daemon=True).start()

    def _probe(self, watch: Watch) -> None:
        transport = watch.transport
        try:
            why = ask(transport, watch.answer_within)
        finally:
            with self._cond:
                self._probing.discard(id(transport))
        with self._cond:
            # the answer (or its lack) holds for every request waiting on the same connection
            waiting = [w for _, _, w in self._heap if w.transport is transport and w.active]
            if why is None:
                watch.probes += 1
                later = time.monotonic() + watch.probe_after  # still waiting on a live host: ask again then
                for other in waiting:
                    other.probes += 1
                    other.due = max(other.due, later)
                self._heap = [(w.due, order, w) for _, order, w in self._heap]
                heapq.heapify(self._heap)
                if watch.active:
                    watch.due = later
                    heapq.heappush(self._heap, (watch.due, next(self._order), watch))
                self._cond.notify()
                return
            for gone in [watch, *waiting]:
                if gone.active and gone.silent is None:
                    gone.silent = why
        transport.close()  # the requests blocked on it end now (their channels close)


def ask(transport: paramiko.Transport, within: float) -> str | None:
    """None when the SSH server on ``transport`` answers a keepalive within ``within`` seconds, else why
    not. Its reply (``REQUEST_FAILURE`` from OpenSSH, which knows no such request) proves the host lives,
    whatever its channels are doing. One caller at a time per transport (the watchdog sees to it)."""
    if not transport.is_active():
        return "its connection is closed"
    answered = threading.Event()

    def keepalive() -> None:
        try:
            transport.global_request(KEEPALIVE, wait=True)  # returns when answered or the transport ends
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            answered.set()

    threading.Thread(target=keepalive, name="batchai-keepalive-ask", daemon=True).start()
    if not answered.wait(within):
        return f"its SSH server did not answer a keepalive within {within:g} s"
    return None if transport.is_active() else "its connection closed"


_watchdog = _Watchdog()


@contextmanager
def watched(
    transport: paramiko.Transport | None,
    where: str,
    *,
    probe_after: float = PROBE_AFTER,
    answer_within: float = ANSWER_WITHIN,
) -> Iterator[Watch | None]:
    """Watch the request made inside on ``transport`` (see the module's doc). Where its host was taken for
    gone, the connection is closed and the request's error gives way to ``SSHError`` (code ``unreachable``)
    naming ``where`` and how long the request waited. ``probe_after <= 0`` or no
    transport: not watched."""
    if transport is None or probe_after <= 0:
        yield None
        return
    watch = Watch(transport, where, probe_after, answer_within)
    _watchdog.add(watch)
    try:
        yield watch
    except BaseException as exc:
        _watchdog.remove(watch)
        if watch.silent is None or not isinstance(exc, Exception):
            raise
        raise watch.error() from exc
    _watchdog.remove(watch)  # answered in full: its result stands, even were the connection closed since
