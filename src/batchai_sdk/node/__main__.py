"""Entry point on the nodes: ``python3 <share>/.../batchai_node/__main__.py MODE ...``.

``scheduler STATE_DIR``   the cluster's scheduler daemon (started by ``ctl``)
``ctl STATE_DIR``         one request to the scheduler (JSON on stdin), reply on stdout
``launch JOB_DIR``        one job attempt (started by the scheduler)
``launch -``              the same, started ahead: the job folder comes on stdin (scheduler/spares.py),
                          after the queue head's MPI world to pre-start, if any (job/world.py)
``prep CONFIG NODE``      job preparation on a node (secrets as JSON on stdin)
``rank CONFIG``           one rank (started by mpirun or the launcher)
``rank --world SOCKET``   a rank shim of an MPI world started ahead; its job comes on SOCKET (job/world.py)
``reap TAG``              end every process of a job on this node; prints how many survived
``standby STATE_DIR``     the head's standby on another node (configuration on stdin; scheduler/standby.py)
``standby-watch STATE_DIR``  its loop, started detached by ``standby``
``agent NAME``            the node's warm agent (SSH backend; agent/serve.py), started by the scheduler
``rsh SSH_CONFIG HOST CMD``  mpirun's remote shell: CMD through HOST's agent, else ssh (agent/rsh.py)
``slurm-job batch CONFIG``  inside a Slurm allocation: the job's launcher there (see slurm/step.py)
``stacks --tag T --out D --node N``  write the Python stacks of a job's processes here (hang watchdog)
``gate run`` (config on stdin) | ``gate node ...`` | ``gate allreduce ...``  the health gate (gate/)
"""

from __future__ import annotations

import json
import os
import sys

if not __package__:  # run as a file on a node: make the folder's parent importable as the package
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    __package__ = os.path.basename(os.path.dirname(os.path.abspath(__file__)))

from importlib import import_module

_pkg = __package__


def _mod(name: str):  # type: ignore[no-untyped-def]
    return import_module(f"{_pkg}.{name}")


def main(argv: list[str]) -> int:
    mode, args = (argv[0], argv[1:]) if argv else ("", [])
    refusal = _mod("refusal")
    if refusal.refused():  # a lose_node drill on this node: it answers none of the cluster's commands
        where = refusal.server_address()
        sys.stderr.write(f"ssh: connect to host {where}: refused (fault drill lose_node)\n")
        return int(refusal.UNREACHABLE)
    if mode == "scheduler" and len(args) == 1:
        return int(_mod("scheduler.daemon").run(args[0]))
    if mode == "standby" and len(args) == 1:
        return int(_mod("scheduler.standby").main(args[0]))
    if mode == "standby-watch" and len(args) == 1:
        return int(_mod("scheduler.standby").watch(args[0]))
    if mode == "ctl" and len(args) == 1:
        return int(_mod("scheduler.ctl").main(args[0]))
    if mode == "launch" and args == ["-"]:  # a spare: its job folder comes on stdin (scheduler/spares.py)
        launcher = _mod("job.launcher")
        import concurrent.futures  # noqa: F401 - loaded now, not in the hand-off

        job_dir, world = _mod("scheduler.spares").wait_for_job()
        return int(launcher.Launcher(job_dir, world).main()) if job_dir else 0
    if mode == "launch" and len(args) == 1:
        return int(_mod("job.launcher").Launcher(args[0]).main())
    if mode == "prep" and len(args) == 2:
        raw = sys.stdin.read() if not sys.stdin.isatty() else ""
        secrets = json.loads(raw) if raw.strip() else {}
        containers = _mod("job.containers")
        try:
            return int(_mod("job.rank").run_prep(args[0], args[1], secrets))
        except containers.PullError as exc:  # the launcher reads the reason from stderr
            sys.stderr.write(f"{exc}\n")
            return int(containers.PULL_FAILED)
    if mode == "rank" and len(args) == 2 and args[0] == "--world":  # a shim of a pre-started world
        return int(_mod("job.world").serve_rank(args[1]))
    if mode == "rank" and len(args) in (1, 2):
        secrets = None
        if args[1:] == ["--secrets-on-stdin"]:  # a custom command started over ssh: secrets never in argv
            raw = sys.stdin.read()
            secrets = json.loads(raw) if raw.strip() else {}
        return int(_mod("job.rank").run_rank(args[0], secrets))
    if mode == "slurm-job":
        return int(_mod("slurm.step").main(args))
    if mode == "stacks":
        return int(_mod("job.stacks").main(args))
    if mode == "gate" and args[:1] == ["run"]:  # the gate across nodes: its config as JSON on stdin
        req = json.loads(sys.stdin.read())
        print(json.dumps(_mod("gate.run").run_gate(req["cluster"], req["nodes"], req["level"])), flush=True)
        return 0
    if mode == "gate":
        return int(_mod("gate.probe").main(args))
    if mode == "agent":
        return int(_mod("agent.serve").main(args))
    if mode == "rsh":
        return int(_mod("agent.rsh").main(args))
    if mode == "reap" and len(args) == 1:
        print(_mod("job.procs").reap(args[0]))
        return 0
    sys.stderr.write(__doc__ or "")
    return 2


def leave(code: int, mode: str) -> None:
    """Exit with ``code``. A launcher or rank shim skips the interpreter's own teardown (about 8 ms):
    a node's hand-off waits on these exits, and they leave nothing to tear down (every file they wrote
    is closed, every thread is done or a daemon)."""
    if mode not in ("launch", "rank"):
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code & 0xFF)


if __name__ == "__main__":
    leave(main(sys.argv[1:]), sys.argv[1] if len(sys.argv) > 1 else "")
