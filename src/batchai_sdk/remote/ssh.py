"""Runs commands on a node over SSH (paramiko): the SSH and Azure backends' nodes.

The connection opens lazily on first use and is retried a few times (tenacity); host keys are checked
against a ``HostKeyStore``; a runner can reach a private address through another runner (a
``direct-tcpip`` channel of the jump host used as the socket); a request whose host stops answering
(powered off, cut off) is noticed by a keepalive in seconds (``liveness.py``). paramiko and socket errors
are translated here, at the boundary, into ``SSHError`` / ``HostKeyError`` / ``TimeoutError``.
"""

from __future__ import annotations

import os
import select
import shlex
import socket
import threading
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import paramiko
import tenacity

from ..exceptions import BackendError, BatchAITimeoutError, HostKeyError, SSHAuthenticationError, SSHError
from .base import CommandResult, Runner
from .deadline import bounded, passed
from .host_keys import HostKeyStore, changed_key_error, known_hosts_name
from .liveness import ANSWER_WITHIN, PROBE_AFTER, Watch, watched

_PID_MARK = "__batchai_pid__"


def _retriable(exc: BaseException) -> bool:
    if isinstance(exc, (HostKeyError, paramiko.AuthenticationException, paramiko.BadHostKeyException)):
        return False
    return isinstance(exc, (OSError, EOFError, paramiko.SSHException))


class _DeadlinePassed(tenacity.stop.stop_base):
    """Stop retrying once the caller's deadline (``remote.deadline.io_deadline``) has passed."""

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return passed()


class SSHRunner(Runner):
    """One node over SSH. Lazily connected, thread-safe for parallel commands, a context manager.

    ``connect_kwargs`` go to ``paramiko.SSHClient.connect`` untouched and win over the defaults built
    from the other arguments (e.g. ``{"passphrase": ...}``, ``{"allow_agent": True}``).
    """

    def __init__(
        self,
        host: str,
        *,
        host_keys: HostKeyStore,
        user: str | None = None,
        port: int = 22,
        key_file: str | os.PathLike[str] | None = None,
        node: str | None = None,
        jump: SSHRunner | None = None,
        connect_timeout: float = 10.0,
        retries: int = 3,
        retry_wait: float = 0.3,
        keepalive: float = 15.0,
        io_timeout: float = 30.0,
        probe_after: float = PROBE_AFTER,
        answer_within: float = ANSWER_WITHIN,
        connect_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.host = host
        self.port = int(port)
        self.user = user
        self.key_file = os.path.expanduser(os.fspath(key_file)) if key_file is not None else None
        self.node = node or host
        self.host_keys = host_keys
        self.jump = jump
        self.connect_timeout = connect_timeout
        self.retries = max(1, int(retries))
        self.retry_wait = retry_wait
        self.keepalive = keepalive
        self.io_timeout = io_timeout  # the longest one SFTP request waits for its answer
        # a request unanswered for probe_after has the host asked (a keepalive) whether it lives: no answer
        # within answer_within and it counts as gone at once, not after io_timeout (remote/liveness.py)
        self.probe_after = probe_after
        self.answer_within = answer_within
        self.connect_kwargs = dict(connect_kwargs or {})
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        via = f" via {self.jump.host}" if self.jump is not None else ""
        user = f"{self.user}@" if self.user else ""
        return f"SSHRunner({user}{self.host}:{self.port}{via})"

    @property
    def known_hosts_name(self) -> str:
        return known_hosts_name(self.host, self.port)

    # -- connection --------------------------------------------------------------------------------
    def connect(self) -> paramiko.SSHClient:
        """The connected client; connects (with retries) when there is none or it broke."""
        with self._lock:
            if self._client is not None:
                transport = self._client.get_transport()
                if transport is not None and transport.is_active():
                    return self._client
                self._drop()
            retrying = tenacity.Retrying(
                # a caller's deadline (remote.deadline.io_deadline) ends the retries too
                stop=tenacity.stop_after_attempt(self.retries) | _DeadlinePassed(),
                wait=tenacity.wait_exponential(multiplier=self.retry_wait, max=5.0),
                retry=tenacity.retry_if_exception(_retriable),
                reraise=True,
            )
            try:
                client = retrying(self._connect_once)
            except HostKeyError:
                raise
            except paramiko.BadHostKeyException as exc:
                raise changed_key_error(
                    self.known_hosts_name, exc.key, exc.expected_key, self.host_keys.path
                ) from exc
            except paramiko.AuthenticationException as exc:
                raise SSHAuthenticationError(
                    self._where(),
                    user=self.user,
                    key_file=self.key_file,
                    detail=str(exc) or type(exc).__name__,
                    try_command=self.try_command,
                ) from exc
            except SSHError:
                raise
            except (OSError, EOFError, paramiko.SSHException) as exc:
                raise SSHError(
                    self._where(),
                    f"cannot connect: {_describe(exc)}",
                    code="unreachable",
                    try_command=self.try_command,
                ) from exc
            self._client = client
            return client

    def _where(self) -> str:
        return f"{self.host}:{self.port}" + (f" (via {self.jump.host})" if self.jump is not None else "")

    @property
    def try_command(self) -> str:
        """The ``ssh`` command line that makes this connection by hand (key file, port, jump host)."""
        parts = ["ssh"]
        if self.key_file is not None:
            parts += ["-i", shlex.quote(self.key_file)]
        parts += ["-p", str(self.port)]
        if self.jump is not None:
            jump_user = f"{self.jump.user}@" if self.jump.user else ""
            parts += ["-J", shlex.quote(f"{jump_user}{self.jump.host}:{self.jump.port}")]
        parts.append(shlex.quote(f"{self.user}@{self.host}" if self.user else self.host))
        return " ".join(parts)

    def _connect_once(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        self.host_keys.prime(client, self.known_hosts_name)
        timeout = bounded(self.connect_timeout)
        kwargs: dict[str, Any] = {
            "hostname": self.host,
            "port": self.port,
            "username": self.user,
            "timeout": timeout,
            "banner_timeout": timeout,
            "auth_timeout": timeout,
        }
        if self.key_file is not None:
            kwargs.update(key_filename=self.key_file, allow_agent=False, look_for_keys=False)
        if self.jump is not None:
            kwargs["sock"] = self.jump.open_tcp(self.host, self.port)
        kwargs.update(self.connect_kwargs)
        try:
            client.connect(**kwargs)
        except BaseException:
            client.close()
            raise
        transport = client.get_transport()
        if transport is not None and self.keepalive:
            transport.set_keepalive(max(1, int(self.keepalive)))
        return client

    def watch(self, transport: paramiko.Transport | None) -> AbstractContextManager[Watch | None]:
        """Watch a request on ``transport`` (remote/liveness.py): a host that stops answering is noticed
        within ``probe_after + answer_within`` seconds, its connection closed and ``SSHError`` (code
        ``unreachable``) raised naming it; a live but slow host keeps the request waiting."""
        return watched(
            transport, self._where(), probe_after=self.probe_after, answer_within=self.answer_within
        )

    def transport(self) -> paramiko.Transport:
        transport = self.connect().get_transport()
        if transport is None:  # pragma: no cover - connect() returns an active transport
            raise SSHError(self._where(), "no transport", code="protocol")
        return transport

    def open_tcp(self, host: str, port: int, *, timeout: float | None = None) -> paramiko.Channel:
        """A TCP connection to ``host:port`` made from this node (``direct-tcpip``): jumps and probes."""
        try:
            wait = bounded(timeout or self.connect_timeout)
            return self.transport().open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=wait)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise SSHError(
                f"{host}:{port} (via {self.host})", f"cannot connect: {_describe(exc)}", code="unreachable"
            ) from exc

    def sftp(self) -> paramiko.SFTPClient:
        """An SFTP session on this node (opened once, reopened when the connection broke)."""
        with self._lock:
            client = self.connect()
            if self._sftp is not None:
                channel = self._sftp.get_channel()
                same_connection = channel is not None and channel.get_transport() is client.get_transport()
                if same_connection and channel is not None and not channel.closed:
                    channel.settimeout(bounded(self.io_timeout))
                    return self._sftp
            try:
                with self.watch(client.get_transport()):  # a silent host: paramiko would wait an hour
                    self._sftp = client.open_sftp()
            except (OSError, EOFError, paramiko.SSHException):
                self._drop()  # a stale connection (see _open_session): once more on a fresh one
                try:
                    fresh = self.connect()
                    with self.watch(fresh.get_transport()):
                        self._sftp = fresh.open_sftp()
                except (OSError, EOFError, paramiko.SSHException) as exc:
                    raise SSHError(
                        self._where(), f"cannot open SFTP: {_describe(exc)}", code="protocol"
                    ) from exc
            # every SFTP read is bounded: a host that stops answering (powered off, partitioned) fails the
            # request with a timeout instead of blocking it for as long as TCP keeps the connection; by
            # io_timeout, or sooner when the caller's deadline comes first (job.wait's timeout)
            self._sftp.get_channel().settimeout(bounded(self.io_timeout))  # type: ignore[union-attr]
            return self._sftp

    def drop(self) -> None:
        """Forget the connection (a request on it timed out): the next one connects afresh."""
        with self._lock:
            self._drop()

    def where(self) -> str:
        """``host:port`` (and the jump host), as errors name it."""
        return self._where()

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:  # noqa: S110 - closing a broken session
                pass
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def connected(self) -> bool:
        client = self._client
        transport = client.get_transport() if client is not None else None
        return transport is not None and transport.is_active()

    # -- commands ----------------------------------------------------------------------------------
    def run(self, command: str, *, timeout: float | None = None, stdin: str | None = None) -> CommandResult:
        """Run ``command`` with ``/bin/sh -c`` on the node. On ``timeout`` its process group is killed
        and ``TimeoutError`` raised."""
        # The shell first reports its pid (it leads the session sshd made for the command) so a
        # timed-out command's whole process group can be killed.
        wrapped = "exec /bin/sh -c " + shlex.quote(f'echo "{_PID_MARK} $$" >&2\n{command}')
        channel = self._open_session()
        try:
            # a node that stops answering while the command runs (powered off) is noticed in seconds, not
            # at the command's timeout; a command that runs long and quiet on a live node runs on
            with self.watch(channel.get_transport()) as watch:
                self._start(channel, wrapped, stdin)
                out, err, pid, code = self._collect(channel, timeout)
            if watch is not None and watch.silent is not None:  # the channel closed under it: no exit code
                raise watch.error()
        finally:
            channel.close()
        if code is None:
            self._kill_group(pid)
            raise BatchAITimeoutError(f"command on {self.node}", timeout or 0)
        return CommandResult(self.node, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def _start(self, channel: paramiko.Channel, command: str, stdin: str | None) -> None:
        try:
            channel.exec_command(command)
            if stdin:
                channel.sendall(stdin.encode("utf-8"))
            channel.shutdown_write()
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self._drop_broken(channel.get_transport())
            raise SSHError(
                self._where(), f"cannot start a command: {_describe(exc)}", code="protocol"
            ) from exc

    def _open_session(self) -> paramiko.Channel:
        """A session channel. A connection that cannot open one in ``connect_timeout`` is dropped and
        made afresh, once: after a partition heals, an old connection's TCP can stay silent for tens
        of seconds (its retransmissions backed off) while ``is_active()`` still says True."""
        for attempt in (1, 2):
            transport = self.transport()
            try:
                with self.watch(transport):  # a host gone silent: no second try on a fresh connection
                    return transport.open_session(timeout=bounded(self.connect_timeout))
            except (OSError, EOFError, paramiko.SSHException) as exc:
                self._drop_broken(transport)
                if attempt == 2:
                    raise SSHError(
                        self._where(), f"cannot start a command: {_describe(exc)}", code="protocol"
                    ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop_broken(self, transport: paramiko.Transport | None) -> None:
        """Drop the connection if it still is ``transport`` (another thread may have renewed it)."""
        with self._lock:
            if self._client is not None and self._client.get_transport() is transport:
                self._drop()

    def check(self, *, timeout: float) -> str | None:
        """None when the node runs ``true`` within ``timeout`` over the current connection; else why,
        and the connection is dropped, so the next use connects afresh. (An open transport proves
        nothing: it stays "active" through TCP's whole retry period when the peer went silent.)"""
        with self._lock:
            client = self._client
        transport = client.get_transport() if client is not None else None
        if transport is None or not transport.is_active():
            return "not connected"
        deadline = time.monotonic() + timeout
        try:
            channel = transport.open_session(timeout=timeout)
            try:
                channel.exec_command("true")
                while not channel.exit_status_ready():
                    if time.monotonic() > deadline or channel.closed:
                        raise TimeoutError()
                    time.sleep(0.01)
                code = channel.recv_exit_status()
            finally:
                channel.close()
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self._drop_broken(transport)
            return f"{self._where()} did not run a command within {timeout:g} s: {_describe(exc)}"
        return None if code == 0 else f"{self._where()}: `true` exited with code {code}"

    def _collect(
        self, channel: paramiko.Channel, timeout: float | None
    ) -> tuple[bytes, bytes, int | None, int | None]:
        """Read a channel to its end; code is None when ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out = bytearray()
        err = bytearray()
        pid: int | None = None
        header_done = False
        while True:
            while channel.recv_ready():
                out += channel.recv(65536)
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            if not header_done and b"\n" in err:
                first, _, rest = bytes(err).partition(b"\n")
                if first.startswith(_PID_MARK.encode()):
                    try:
                        pid = int(first.split()[1])
                    except (IndexError, ValueError):
                        pid = None
                    err = bytearray(rest)
                header_done = True
            if (channel.eof_received or channel.closed) and channel.exit_status_ready():
                if not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                continue
            if channel.closed and not channel.recv_ready() and not channel.recv_stderr_ready():
                # closed without an exit status: the connection broke
                raise SSHError(self._where(), "the connection closed while a command ran", code="protocol")
            wait = 1.0
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    return bytes(out), bytes(err), pid, None
                wait = min(wait, 1.0)
            select.select([channel], [], [], wait)
        if not header_done and err.startswith(_PID_MARK.encode()):
            err = bytearray()
        return bytes(out), bytes(err), pid, channel.recv_exit_status()

    def _kill_group(self, pid: int | None) -> None:
        if pid is None or pid <= 1:
            return
        kill = f"kill -TERM -- -{pid} 2>/dev/null; sleep 0.5; kill -KILL -- -{pid} 2>/dev/null; true"
        try:
            channel = self.transport().open_session(timeout=self.connect_timeout)
            channel.exec_command(kill)
            channel.shutdown_write()
            channel.recv_exit_status()
            channel.close()
        except (BackendError, OSError, EOFError, paramiko.SSHException):
            pass  # the node is gone; nothing left to kill from here


def probe_ssh(host: str, port: int, *, timeout: float = 3.0, via: SSHRunner | None = None) -> str | None:
    """Quick reachability check: None when an SSH server answers at ``host:port``, else the reason.

    Reads the server's banner only (no authentication), directly or through ``via``'s connection.
    """
    try:
        if via is not None:
            channel = via.open_tcp(host, port, timeout=timeout)
            try:
                channel.settimeout(timeout)
                banner = _read_banner(channel.recv, timeout)
                _say_hello(channel.sendall, banner)
            finally:
                channel.close()
        else:
            with socket.create_connection((host, port), timeout=timeout) as sock:
                sock.settimeout(timeout)
                banner = _read_banner(sock.recv, timeout)
                _say_hello(sock.sendall, banner)
    except SSHError as exc:
        return str(exc)
    except (OSError, EOFError, paramiko.SSHException) as exc:
        return f"ssh {host}:{port} unreachable: {_describe(exc)}"
    if not banner.startswith(b"SSH-"):
        return f"ssh {host}:{port}: no SSH server answers (got {banner[:20]!r})"
    return None


def _say_hello(send: Any, banner: bytes) -> None:
    """Answer the server's banner with ours, so its log shows a client that left rather than a scan
    that "did not send an identification string"."""
    if banner.startswith(b"SSH-"):
        try:
            send(b"SSH-2.0-batchai_sdk_probe\r\n")
        except (OSError, EOFError, paramiko.SSHException):
            pass


def _read_banner(recv: Any, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data and len(data) < 256 and time.monotonic() < deadline:
        chunk = recv(256)
        if not chunk:
            break
        data += chunk
    return data


def _describe(exc: BaseException) -> str:
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return "connection refused"
    if isinstance(exc, socket.timeout):
        return "timed out"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
