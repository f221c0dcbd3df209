"""The Batch AI tutorial on machines you reach by SSH: a lab cluster, existing VMs, a workstation or two.

Every host must see the same folder at ``--share-path`` (an NFS or SMB mount, or the folder itself when
there is one host), and have Python with TensorFlow 2.15 and Horovod 0.28 (the ``train`` extra) and
Open MPI. The first host is the head node: the job wrapper and mpirun run there. The script trains the
tutorial's CNN with one Horovod rank per host, streams the output, downloads the model and scales the
cluster to zero.

    python examples/ssh_cluster.py --user azureuser --key-file ~/.ssh/id_ed25519 \\
        --share-path /mnt/share 10.0.0.4 10.0.0.5

Every option can come from the environment instead: BATCHAI_SSH_HOSTS (separated by commas or spaces),
BATCHAI_SSH_USER, BATCHAI_SSH_KEY, BATCHAI_SSH_PORT, BATCHAI_SSH_SHARE, BATCHAI_SSH_PYTHON.
``--dry-run`` checks the settings and prints the plan without connecting.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from batchai_sdk import BatchAIError, HostKeyError, JobSpec, NodeError, Workspace

TRAINING_MODULE = "batchai_sdk.train.cifar10"


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    hosts = env.get("BATCHAI_SSH_HOSTS", "").replace(",", " ").split()
    parser = argparse.ArgumentParser(
        prog="ssh_cluster.py",
        description="Run the Batch AI tutorial (Horovod over MPI) on machines reached by SSH.",
        epilog="Options default to BATCHAI_SSH_* environment variables; see the module docstring.",
    )
    parser.add_argument(
        "hosts",
        nargs="*",
        default=hosts,
        help="host names or addresses; the first is the head node (default: $BATCHAI_SSH_HOSTS)",
    )
    parser.add_argument("--user", default=env.get("BATCHAI_SSH_USER") or getpass.getuser())
    parser.add_argument(
        "--key-file",
        default=env.get("BATCHAI_SSH_KEY", "~/.ssh/id_ed25519"),
        help="private key that logs in to every host (default: %(default)s)",
    )
    parser.add_argument("--port", type=int, default=int(env.get("BATCHAI_SSH_PORT", "22")))
    parser.add_argument(
        "--share-path",
        default=env.get("BATCHAI_SSH_SHARE"),
        help="absolute path of the folder every host shares (required; $BATCHAI_SSH_SHARE)",
    )
    parser.add_argument(
        "--python",
        default=env.get("BATCHAI_SSH_PYTHON", "python3"),
        help="the hosts' Python with TensorFlow and Horovod (default: %(default)s)",
    )
    parser.add_argument("--tcp-interface", help="network interface MPI uses between hosts, e.g. eth0")
    parser.add_argument("--known-hosts", help="known_hosts file with the hosts' keys")
    parser.add_argument(
        "--trust-on-first-use",
        action="store_true",
        help="accept and pin host keys not seen before (check their fingerprints!)",
    )
    parser.add_argument("--workspace", default="lab", help="workspace name (default: %(default)s)")
    parser.add_argument("--nodes", type=int, help="nodes of the cluster and the job (default: every host)")
    parser.add_argument("--node-setup", help="shell command run once on every node before its first job")
    parser.add_argument("--job-preparation", help="shell command run once per host before the ranks start")
    parser.add_argument(
        "--dataset",
        choices=("digits", "cifar10"),
        default="digits",
        help="digits (bundled with scikit-learn, offline) or cifar10 (default: %(default)s)",
    )
    parser.add_argument("--data-dir", help="folder on the hosts holding cifar-10-python.tar.gz")
    parser.add_argument("--epochs", type=int, default=2, help="default: %(default)s")
    parser.add_argument("--keep", action="store_true", help="do not scale the cluster to zero at the end")
    parser.add_argument("--dry-run", action="store_true", help="check the settings, print the plan, exit")
    return parser


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Refuse incomplete settings with a usage error (exit status 2); return the node count."""
    if not args.hosts:
        parser.error("no hosts: name them as arguments or in BATCHAI_SSH_HOSTS")
    if not args.share_path:
        parser.error("--share-path (or BATCHAI_SSH_SHARE) is required")
    nodes: int = args.nodes if args.nodes is not None else len(args.hosts)
    if not 1 <= nodes <= len(args.hosts):
        parser.error(f"--nodes must be between 1 and the {len(args.hosts)} host(s) given")
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    return nodes


def job_spec(args: argparse.Namespace, nodes: int, name: str) -> JobSpec:
    train_args = ["--dir", "$AZ_BATCHAI_OUTPUT_MODEL", "--dataset", args.dataset]
    train_args += ["--epochs", str(args.epochs)]
    if args.data_dir:
        train_args += ["--data-dir", args.data_dir]
    return JobSpec(
        name=name,
        experiment="cifar",
        cluster=f"ssh{nodes}",
        node_count=nodes,
        python_script=TRAINING_MODULE,
        args=tuple(train_args),
        job_preparation=args.job_preparation,
        output_directories={"MODEL": "$AZ_BATCHAI_JOB_MOUNT_ROOT/models"},
    )


def workspace_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {
        "hosts": list(args.hosts),
        "user": args.user,
        "key_file": args.key_file,
        "port": args.port,
        "share_path": args.share_path,
        "trust_on_first_use": args.trust_on_first_use,
        "python": args.python,
    }
    if args.known_hosts:
        options["known_hosts"] = args.known_hosts
    if args.tcp_interface:
        options["tcp_interface"] = args.tcp_interface
    return options


def run(args: argparse.Namespace, nodes: int, spec: JobSpec) -> int:
    with Workspace.ssh(args.workspace, **workspace_options(args)) as ws:
        exp = ws.create_experiment(spec.experiment, exist_ok=True)
        cluster = ws.create_cluster(
            spec.cluster, vm_size="ssh", nodes=nodes, node_setup=args.node_setup, exist_ok=True
        )
        if cluster.target_nodes != nodes:
            cluster.resize(nodes)
        cluster.wait_until_steady(timeout=600)
        print(cluster.state, cluster.node_counts)

        job = exp.job_from_spec(spec)
        job.submit()  # node setup runs here the first time: keys for mpirun, then --node-setup
        print(f"submitted {exp.name}/{job.name} on {', '.join(args.hosts[:nodes])}")
        try:
            for line in job.stream("stdout.txt"):
                print(line)
            state = job.wait()
            print(f"job {state}, exit code {job.exit_code}", job.status.failure_reason or "")
            for f in job.files():
                print(f"{f.name:40} {f.type:9} {f.size or 0:>10}")
            if state != "succeeded":
                print("\n".join(job.tail("stderr.txt", lines=20)), file=sys.stderr)
                return 1
            model = job.download("saved_models/keras_cifar10_trained_model.h5", Path(f"{job.name}.h5"))
            print(f"model downloaded to {model}")
            return 0
        finally:
            if not args.keep:
                cluster.resize(0)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = build_parser(os.environ if env is None else env)
    args = parser.parse_args(argv)
    nodes = check(args, parser)
    try:
        spec = job_spec(args, nodes, f"cifar-{time.strftime('%Y%m%d-%H%M%S')}")
        if args.dry_run:
            plan = {"workspace": {"name": args.workspace, **workspace_options(args)}, "job": spec.to_dict()}
            print(json.dumps(plan, indent=2))
            return 0
        return run(args, nodes, spec)
    except HostKeyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("(pass --known-hosts, or --trust-on-first-use once you checked the key)", file=sys.stderr)
        return 2
    except NodeError as exc:
        for node, why in exc.failures.items():
            print(f"error: {exc.operation}: {node}: {why}", file=sys.stderr)
        return 2
    except BatchAIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
