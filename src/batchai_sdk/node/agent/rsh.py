"""MPI's remote shell on the head node (``--mca plm_rsh_agent``): ``python3 -S …/__main__.py rsh SSH_CONFIG
HOST WORDS…`` asks HOST's agent to run the daemon command mpirun gives (``orted …``), as ``ssh -F
SSH_CONFIG HOST WORDS…`` would, without the SSH session and login shell that costs per job. It relays
the daemon's output to its stderr and exits with the daemon's code, as ssh does; the daemon carries the
job's tag. Where the node has no agent (or this is no job's mpirun) it becomes that ssh command.
"""

from __future__ import annotations

import os
import sys

from ..common import TAG_VAR
from . import client


def main(args: list[str]) -> int:
    if len(args) < 3:
        sys.stderr.write("usage: rsh SSH_CONFIG HOST COMMAND...\n")
        return 255
    ssh = ["ssh", "-F", args[0]]
    host, words = args[1], args[2:]
    tag = os.environ.get(TAG_VAR, "")
    node_main = os.path.abspath(sys.modules["__main__"].__file__ or "")
    pid = 0
    request = {"op": "exec", "node_main": node_main, "command": " ".join(words), "env": {TAG_VAR: tag}}
    try:
        if not tag:
            raise client.Unavailable("not a job's mpirun")
        conn = client.Connection(ssh, host)
    except client.Unavailable:
        return by_ssh(ssh, host, words)
    try:
        conn.send(request)
        answer = client.first_answer(conn, host)
        pid = int(answer["pid"]) if answer.get("ok") else 0
        if not answer.get("ok"):
            sys.stderr.write(
                f"the node agent of {host} could not start MPI's daemon: {answer.get('message')}\n"
            )
            return 255
        while True:
            doc = conn.receive()
            if doc is None:
                continue
            if "out" in doc:
                sys.stderr.write(str(doc["out"]))
                sys.stderr.flush()
            if "exit" in doc:
                return int(doc["exit"])
    except client.Unavailable:  # refused as stale or stopping: nothing ran
        return by_ssh(ssh, host, words)
    except client.Lost as exc:
        if not pid:  # it may have started: never a second daemon
            sys.stderr.write(f"{exc}\n")
            return 255
        # the agent is gone, the daemon (its own session there) is not: mpirun keeps this process
        # until the daemon ends, as it keeps an ssh
        return by_ssh(ssh, host, [client.watch_command(pid, tag)])
    finally:
        conn.close()


def by_ssh(ssh: list[str], host: str, words: list[str]) -> int:
    """Become ``ssh … HOST WORDS…`` (this process's place under mpirun, its exit code ssh's)."""
    os.execvp(ssh[0], [*ssh, host, *words])  # noqa: S606 - ssh takes the command as argv words
    return 255  # pragma: no cover - execvp returns only by raising
