"""The node agent itself (``python3 -S …/batchai_node/__main__.py agent NAME``), on one node.

The scheduler starts it over SSH and holds its standard input: the agent listens on a Unix socket in the
private ``~/.batchai-ssh`` folder (0600), says ``ready <socket path>`` on stdout, and serves head-node
processes that reach that socket through the kept SSH connection (a forwarded stream, keeper.py). Each
connection gets a greeting line, then carries one request, a JSON object on one line:

``{"op": "reap", "tag": T}``  end the job's processes here (procs.reap) → ``{"ok": true, "left": N}``
``{"op": "prep", "config": P, "node": N, "env": {...}, "secrets": {...}}``  job preparation (rank.run_prep)
    → ``{"ok": true, "code": C, "error": E}``; the client closing the connection stops it
``{"op": "rank", "config": P, "env": {...}, "secrets": {...}}``  start the rank shim
    (``… rank P --secrets-on-stdin``, its output appended to the job's stdout.txt/stderr.txt) →
    ``{"ok": true, "pid": PID, "beat": S}``, then ``{"beat": 1}`` every S seconds while it runs (a
    launcher that hears nothing for a few beats counts the agent lost: client.AgentRank), later
    ``{"exit": CODE}``; meanwhile ``{"signal": N}`` lines from the client are sent to the shim's process
    group
``{"op": "exec", "command": C, "env": {TAG_VAR: T}}``  MPI's daemon as ``ssh HOST C`` runs it (rsh.py):
    ``{"ok": true, "pid": PID}``, its output as ``{"out": TEXT}`` lines, then ``{"exit": CODE}``

Every process it starts has the job's tag (``env``) in the environment it was started with, so fencing,
terminate, the reaper and leftovers detection find it as they find one started over SSH; the shim is a
new interpreter for that reason (a tag must be in a process's initial environment), but no SSH session,
login shell or agent start-up is paid per hand-off. A request is checked before anything is done (api.py's
limits: size, depth, finite numbers, typed fields; the env names are the ones a launcher carries); one
naming another copy of the node code is refused as ``stale``, so the client can use SSH instead knowing
nothing ran. Secrets come in the request, never in an argv or a log.

It says ``beat`` on stdout every ``HEARTBEAT_S``: the scheduler replaces an agent that stops saying
it (keeper.py). Its stdin is its lifeline: at EOF (the scheduler exited or died, or its connection was
lost) it stops listening at once — nothing more can be started through it — and exits once the shims it
started have ended, their exits reported to the launchers that wait on them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..common import TAG_VAR, load
from ..job import procs
from ..job.containers import PULL_FAILED, PullError
from ..job.launcher import PASSED_TO_REMOTE
from ..job.rank import run_prep
from ..protocol.fields import ENV_NAME, NODE_ID, RequestError, invalid, string_map, text
from ..protocol.launch import LaunchConfig
from ..protocol.paths import LAUNCH_CONFIG
from ..scheduler.api import parse
from .client import HEARTBEAT_S, SOCKET_DIR

NAME = re.compile(r"^[0-9a-f]{8,64}$")
TAG = re.compile(r"^[0-9a-f]{8,64}$")
OPS = ("reap", "prep", "rank", "exec")
CARRIED = frozenset(PASSED_TO_REMOTE)
REQUEST_S = 30.0


def socket_path(name: str) -> str:
    return os.path.join(os.path.expanduser("~"), SOCKET_DIR, f"agent-{name}.sock")


def check(doc: dict[str, Any], node_main: str) -> dict[str, Any]:
    """The request's fields, checked; RequestError before anything is done."""
    op = doc.get("op")
    if op not in OPS:
        raise invalid("op", op, f"one of {', '.join(OPS)}")
    if doc.get("node_main") != node_main:  # another version of the node code: the client uses SSH
        raise RequestError("stale", "this agent runs another copy of the node code")
    if op == "reap":
        return {"op": op, "tag": text(doc, "tag", TAG)}
    if op == "exec":  # MPI's daemon, as ``ssh HOST COMMAND`` would start it (rsh.py)
        env = string_map(doc, "env", ENV_NAME)
        if set(env) != {TAG_VAR} or not TAG.match(env[TAG_VAR]):
            raise invalid("env", sorted(env), "the job's tag alone")
        return {"op": op, "command": text(doc, "command"), "env": env}
    config = text(doc, "config")
    if not config or not os.path.isabs(config) or os.path.basename(config) != LAUNCH_CONFIG:
        raise invalid("config", config, f"an absolute path to a {LAUNCH_CONFIG}")
    env = string_map(doc, "env", ENV_NAME)
    if set(env) - CARRIED or not TAG.match(env.get(TAG_VAR, "")):
        raise invalid("env", sorted(env), f"the job's tag and names among {', '.join(sorted(CARRIED))}")
    out = {"op": op, "config": config, "env": env, "secrets": string_map(doc, "secrets", ENV_NAME)}
    if op == "prep":
        out["node"] = text(doc, "node", NODE_ID)
    return out


class Agent:
    def __init__(self, name: str) -> None:
        self.path = socket_path(name)
        self.node_main = os.path.abspath(sys.modules["__main__"].__file__ or "")
        self.lock = threading.Condition()
        self.closing = False
        self.running = 0  # shims and daemons started and not yet ended
        self.server: socketserver.ThreadingUnixStreamServer | None = None
        self.inode: int | None = None  # of the socket this agent bound (a newer agent may bind the path)

    # -- requests
    def handle(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        try:
            conn.settimeout(REQUEST_S)  # a client that never sends its request holds nothing for long
            conn.sendall(json.dumps({"agent": os.getpid()}).encode() + b"\n")
            line = reader.readline((1 << 20) + 1)
            if not line:
                return
            conn.settimeout(None)  # a shim's or daemon's exit is waited for as long as it runs
            try:
                request = check(parse(line), self.node_main)
            except RequestError as exc:
                send(conn, {"ok": False, "error": exc.code, "message": str(exc)})
                return
            if request["op"] == "reap":
                send(conn, {"ok": True, "left": procs.reap(request["tag"])})
            elif request["op"] == "exec":
                self.exec(conn, request)
            elif request["op"] == "prep":
                self.prep(conn, reader, request)
            else:
                self.rank(conn, reader, request)
        except OSError:
            pass  # the client went away
        finally:
            reader.close()
            conn.close()

    def prep(self, conn: socket.socket, reader: Any, request: dict[str, Any]) -> None:
        gone = threading.Event()

        def watch() -> None:  # the client closing its end means: stop
            reader.read()
            gone.set()

        threading.Thread(target=watch, daemon=True).start()
        code, error = 0, ""
        try:
            # the tag joins the environment of the preparation command (job_env adds these last)
            extra = {**request["env"], **request["secrets"]}
            code = run_prep(request["config"], request["node"], extra, gone.is_set)
        except PullError as exc:
            code, error = PULL_FAILED, str(exc)
        except (OSError, ValueError, KeyError) as exc:
            code, error = 1, f"job preparation could not start: {exc!r}"
        send(conn, {"ok": True, "code": code, "error": error})

    def rank(self, conn: socket.socket, reader: Any, request: dict[str, Any]) -> None:
        argv = [sys.executable, "-S", self.node_main, "rank", request["config"], "--secrets-on-stdin"]

        def start() -> subprocess.Popen[bytes]:
            cfg: LaunchConfig = load(request["config"])
            out_dir = cfg["stdouterr_dir"]
            with (
                open(os.path.join(out_dir, "stdout.txt"), "ab") as out,
                open(os.path.join(out_dir, "stderr.txt"), "ab") as err,
            ):
                return subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=err,
                    env={**os.environ, **request["env"]},
                    start_new_session=True,
                )

        proc = self.started(conn, start, "the rank shim did not start")
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps(request["secrets"]).encode())
                proc.stdin.close()
            except OSError:
                pass
            send(conn, {"ok": True, "pid": proc.pid, "beat": HEARTBEAT_S})
            threading.Thread(target=self.relay_signals, args=(reader, proc), daemon=True).start()
            while True:
                try:
                    code = proc.wait(timeout=HEARTBEAT_S)
                    break
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(OSError):  # its launcher went away: the shim goes on
                        send(conn, {"beat": 1})
            try:
                send(conn, {"exit": code})
            except OSError:
                pass  # its launcher went away: the scheduler's cleanup knows the job by its tag
        finally:
            self.ended()

    def exec(self, conn: socket.socket, request: dict[str, Any]) -> None:
        """A command through the user's shell, as sshd runs one: its output relayed as ``{"out": …}``
        lines, then ``{"exit": CODE}``."""
        shell = _login_shell()
        proc = self.started(
            conn,
            lambda: subprocess.Popen(
                [shell, "-c", request["command"]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                # the agent's environment already holds what the user's rc file exported (it was
                # started through it); SHLVL=1 keeps bash from reading it again for every command,
                # as it does for what looks like sshd's own child (SSH_CLIENT set, SHLVL below 2)
                env={**os.environ, "SHLVL": "1", **request["env"]},
                cwd=os.path.expanduser("~"),
                start_new_session=True,
            ),
            "could not run the command",
        )
        if proc is None:
            return
        try:
            assert proc.stdout is not None
            send(conn, {"ok": True, "pid": proc.pid})
            out = proc.stdout.fileno()
            for chunk in iter(lambda: os.read(out, 65536), b""):
                try:
                    send(conn, {"out": chunk.decode(errors="replace")})
                except OSError:
                    pass  # its caller went away; the command goes on, as under a lost ssh
            code = proc.wait()
            try:
                send(conn, {"exit": code if code >= 0 else 255})  # as ssh reports a signal
            except OSError:
                pass
        finally:
            self.ended()

    def started(
        self, conn: socket.socket, start: Callable[[], subprocess.Popen[bytes]], failed: str
    ) -> subprocess.Popen[bytes] | None:
        """``start()``'s process, counted as running until ``ended()`` (the agent exits only once none
        runs); None when the agent is stopping (the scheduler's connection is gone: it starts nothing
        more) or the start failed, the client told either way."""
        with self.lock:
            if self.closing:
                send(conn, {"ok": False, "error": "closing", "message": "the agent is stopping"})
                return None
            try:
                proc = start()
            except (OSError, ValueError, KeyError, TypeError) as exc:
                send(conn, {"ok": False, "error": "failed", "message": f"{failed}: {exc!r}"})
                return None
            self.running += 1
            return proc

    def ended(self) -> None:
        """A process ``started`` gave ended (its exit reported, or its client gone)."""
        with self.lock:
            self.running -= 1
            self.lock.notify_all()

    @staticmethod
    def relay_signals(reader: Any, proc: subprocess.Popen[bytes]) -> None:
        for line in reader:
            try:
                sig = int(json.loads(line)["signal"])
            except (ValueError, KeyError, TypeError):
                continue
            if sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT) and proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    # -- life
    def serve(self) -> int:
        folder = os.path.dirname(self.path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        agent = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                agent.handle(self.request)

        old = os.umask(0o177)  # the socket is its owner's only
        try:
            self.server = socketserver.ThreadingUnixStreamServer(self.path, Handler)
        finally:
            os.umask(old)
        self.server.daemon_threads = True
        self.inode = os.stat(self.path).st_ino
        threading.Thread(target=self.server.serve_forever, args=(0.5,), daemon=True).start()
        sys.stdout.write(f"ready {self.path}\n")
        sys.stdout.flush()
        threading.Thread(target=beat, daemon=True).start()
        while os.read(0, 65536):  # the scheduler's end of the channel: its EOF ends us
            pass
        self.close()
        with self.lock:
            while self.running:
                self.lock.wait()
        return 0

    def close(self) -> None:
        with self.lock:
            self.closing = True
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        try:
            if os.stat(self.path).st_ino == self.inode:
                os.unlink(self.path)
        except OSError:
            pass


def _login_shell() -> str:
    import pwd

    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        shell = ""
    return shell if shell and os.path.isabs(shell) and os.access(shell, os.X_OK) else "/bin/sh"


def beat() -> None:
    """``beat`` on stdout, to the scheduler that keeps this agent (keeper.py), until it stops reading."""
    while True:
        time.sleep(HEARTBEAT_S)
        try:
            sys.stdout.write("beat\n")
            sys.stdout.flush()
        except (OSError, ValueError):
            return


def send(conn: socket.socket, doc: dict[str, Any]) -> None:
    conn.sendall(json.dumps(doc).encode() + b"\n")


def main(args: list[str]) -> int:
    if len(args) != 1 or not NAME.match(args[0]):
        sys.stderr.write("usage: agent NAME (hex)\n")
        return 2
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    return Agent(args[0]).serve()
