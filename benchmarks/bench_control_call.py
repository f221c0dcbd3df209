"""A control call (a job's state, a terminate, a ping) to a running scheduler on a 2-node SSH cluster (sshd
nodes on loopback), as a fresh client makes it: ``batchai job show`` or ``job terminate`` each open the
workspace and ask the cluster's scheduler once.

Starts two real OpenSSH servers on 127.0.0.2 and 127.0.0.3 (as the SSH tests do; needs root and
openssh-server), starts a long job so the scheduler stays up (it exits when idle), then times ``--calls``
rounds of each control call made by a scheduler handle with nothing cached (``backend.scheduler(spec)``),
as a new process has it.
Printed: the median and max seconds per call, and how many SSH probes of the cluster's hosts each call
made (a host probed is a round trip; issue 31: a control call carries a job reference only, so it probes
nothing and builds no cluster configuration).

    python benchmarks/bench_control_call.py --calls 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "ssh"))

from sshd import NODE_ADDRESSES, sshd_available, start_nodes  # noqa: E402

from batchai_sdk._models import JobState  # noqa: E402
from batchai_sdk.backends.ssh.backend import SSHBackend  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10, help="rounds of each control call")
    args = parser.parse_args()
    if not sshd_available() or os.geteuid() != 0:
        print("needs root and OpenSSH's sshd (apt-get install openssh-server)", file=sys.stderr)
        return 2
    probes = [0]
    probe = SSHBackend._probe

    def counted(self: SSHBackend, node: Any) -> str | None:
        probes[0] += 1
        return probe(self, node)

    SSHBackend._probe = counted  # type: ignore[method-assign]  # counts, changes nothing
    with (
        tempfile.TemporaryDirectory(prefix="bench_ctl_") as tmp,
        start_nodes(Path(tmp) / "sshd", NODE_ADDRESSES[:2]) as nodes,
    ):
        root = Path(tmp)
        with nodes.workspace("bench", root, nodes.addresses) as ws:
            cluster = ws.create_cluster("c", nodes=2)
            job = ws.create_experiment("e").create_job("j", cluster=cluster, command_line="sleep 600")
            job.submit()
            deadline = time.monotonic() + 120
            while job.state is not JobState.RUNNING and time.monotonic() < deadline:
                time.sleep(0.1)
            if job.state is not JobState.RUNNING:
                print(job.tail("stderr.txt", 20), file=sys.stderr)
                return 1
            backend, spec = ws.backend, cluster.spec
            calls: dict[str, Callable[[], object]] = {
                "job state": lambda: backend.scheduler(spec).job_state("e", "j"),
                "terminate (unknown)": lambda: backend.scheduler(spec).terminate("e", "none"),
                "ping": lambda: backend.scheduler(spec).ensure_running(),
            }
            for label, call in calls.items():
                times: list[float] = []
                probes[0] = 0
                for _ in range(args.calls):
                    t = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - t)
                print(
                    f"{label:20s} median {statistics.median(times) * 1000:6.1f} ms, "
                    f"max {max(times) * 1000:6.1f} ms, host probes per call {probes[0] / args.calls:.1f} "
                    f"(load {os.getloadavg()[0]:.1f})"
                )
            job.terminate(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
