"""``ctl``: how a client reaches the cluster's scheduler. Run on the head node (directly, or over SSH by
the client), it reads one JSON request on stdin, starts the scheduler if none answers, passes the
request over the scheduler's Unix socket and prints the JSON reply. Only a request that carries the
cluster's configuration starts a scheduler: a control call (a job's state, a terminate, a ping) carries a
job reference only, and is answered ``needs_cluster`` when none runs (the client then sends it again with
the configuration). Secrets travel in the request on
stdin and the socket, never on a command line."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import struct
import subprocess
import sys
import time
from typing import Any

from ..common import write_json_atomic
from ..protocol.fields import RequestError
from ..protocol.names import E_NEEDS_CLUSTER, SCHED_SOCKET
from . import api

START_TIMEOUT = 20.0


def is_scheduler_socket(sock_path: str) -> bool:
    """Whether ``sock_path`` is a socket (not a link, a file) owned by this user: checked before a connect."""
    try:
        info = os.lstat(sock_path)
    except OSError:
        return False
    return stat.S_ISSOCK(info.st_mode) and info.st_uid == os.getuid()


def peer_is_scheduler(conn: socket.socket, sock_path: str) -> bool:
    """Whether the process at the other end is this user's scheduler of the socket's state folder (its
    working directory, where it binds the socket): checked before anything, a secret above all, is sent.
    Where the kernel cannot say (no SO_PEERCRED), the socket's own checks stand."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return True
    try:
        pid, uid, _gid = struct.unpack(
            "3i", conn.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
        )
        if uid != os.getuid():
            return False
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        if b"scheduler" not in args:
            return False
        return os.path.samefile(f"/proc/{pid}/cwd", os.path.dirname(os.path.abspath(sock_path)))
    except OSError:
        return False


def send(sock_path: str, request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """The scheduler's reply, or None when none answered (not started, exiting, or what is at the socket's
    path is not this user's scheduler: nothing is sent to it)."""
    if not is_scheduler_socket(sock_path):
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(sock_path)
            if not peer_is_scheduler(conn, sock_path):
                return None
            conn.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    return None
                data += chunk
        except OSError:
            return None
    reply: dict[str, Any] = json.loads(data)
    return reply


def start_scheduler(state_dir: str, node_main: str) -> subprocess.Popen[bytes]:
    log = open(os.path.join(state_dir, "scheduler.log"), "ab")  # noqa: SIM115 - handed to the daemon
    with log:
        return subprocess.Popen(
            [sys.executable, "-S", node_main, "scheduler", state_dir],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )


def main(state_dir: str) -> int:
    try:  # checked before anything is written: a bad cluster.json would stop every scheduler start
        request = api.check_request(api.parse(sys.stdin.buffer.read(api.MAX_REQUEST + 1)))
    except RequestError as exc:
        print(json.dumps({"ok": False, "error": exc.code, "message": str(exc)}))
        return 0
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    cluster = request.get("cluster")
    if cluster:
        write_json_atomic(os.path.join(state_dir, "cluster.json"), cluster, sync=False)
    os.chdir(state_dir)  # connect by the socket's short relative name (AF_UNIX paths are capped at 108 bytes)
    sock_path = SCHED_SOCKET
    deadline = time.monotonic() + START_TIMEOUT
    started: subprocess.Popen[bytes] | None = None
    while True:
        reply = send(sock_path, request, timeout=60)
        if reply is not None:
            print(json.dumps(reply))
            return 0
        if request.get("op") != "submit" and not os.path.exists(sock_path) and request.get("no_start"):
            print(json.dumps({"ok": True, "running": False}))
            return 0
        if not cluster:  # nothing to start it with: the client sends the request again with the configuration
            message = "no scheduler answers; only a request with the cluster's configuration starts one"
            print(json.dumps({"ok": False, "error": E_NEEDS_CLUSTER, "message": message}))
            return 0
        if time.monotonic() > deadline:
            print(
                json.dumps({"ok": False, "error": "unavailable", "message": "the scheduler did not answer"})
            )
            return 0
        if started is None or started.poll() is not None:  # none started yet, or it gave way to another
            with contextlib.suppress(OSError):
                started = start_scheduler(state_dir, cluster["node_main"])
        time.sleep(0.02)
