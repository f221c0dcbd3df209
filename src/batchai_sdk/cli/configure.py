"""``batchai configure``: the profile (backend for new workspaces, its options, defaults)."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from typing import Any

from .._registry import BACKENDS
from ._context import Context, Result, UsageError
from ._format import OUTPUT_FORMATS
from ._params import Commands, positive


def register(commands: Commands) -> None:
    p = commands.command(
        "configure",
        configure,
        "the profile: backend for new workspaces, its options, defaults",
        examples=(
            "batchai configure --backend ssh --hosts 10.0.0.4 10.0.0.5 --user azureuser "
            "--key-file ~/.ssh/id_ed25519 --share-root /mnt/share",
            "batchai configure --backend azure --subscription 00000000-0000-0000-0000-000000000000",
            "batchai configure --defaults group=batchai.horovod workspace=batchaidev output=table",
            "batchai configure --backend local",
            "batchai configure",
        ),
    )
    p.add_argument("--backend", choices=BACKENDS, help="backend of workspaces created from now on")
    p.add_argument(
        "--local-root",
        help="local: folder holding the -g/-w local workspaces (default: $BATCHAI_HOME/groups)",
    )
    p.add_argument("--hosts", nargs="+", help="ssh: the nodes' addresses; the first is the head node")
    p.add_argument("--user", help="ssh: user on the nodes")
    p.add_argument("--key-file", help="ssh: private key file (its path is stored, never its content)")
    p.add_argument(
        "--share-root", help="ssh: a folder every node sees; workspaces go below <root>/<group>/<ws>"
    )
    p.add_argument("--port", type=positive, help="ssh: port (default 22)")
    p.add_argument("--known-hosts", help="ssh: known_hosts file of the nodes")
    p.add_argument(
        "--trust-on-first-use", action="store_true", default=None, help="ssh: pin unknown host keys"
    )
    p.add_argument("--jump-host", help="ssh: user@host to reach the nodes through")
    _ssh_node_arguments(p)
    p.add_argument("--partition", help="slurm: the partition new clusters use (default: Slurm's default)")
    p.add_argument("--account", help="slurm: the account jobs are charged to")
    p.add_argument("--login-host", help="slurm: the login node (omit when this machine is one)")
    p.add_argument("--subscription", help="azure: subscription id")
    p.add_argument("--location", "-l", help="azure: region of new workspaces (default: the group's)")
    p.add_argument(
        "--defaults",
        nargs="+",
        metavar="KEY=VALUE",
        help="defaults for group, workspace, experiment, output; KEY= clears one",
    )


# Workspace.ssh's other options, as flags: (option, type, help). --env and --mpi-args are parsed apart.
SSH_FLAGS: tuple[tuple[str, Callable[[str], Any], str], ...] = (
    ("python", str, "the nodes' Python, with the train extra (default python3)"),
    ("mpirun", str, "mpirun on the head node (default mpirun)"),
    ("node_state_dir", str, "a folder of the nodes' own (default ~/.batchai)"),
    ("authorized_keys_path", str, "where node setup adds the cluster's key (default ~/.ssh/authorized_keys)"),
    ("tcp_interface", str, "the network interface MPI and NCCL use, e.g. eth0"),
    ("state_dir", str, "this machine's folder for the workspace's state (default $BATCHAI_HOME/ssh/<ws>)"),
    ("connect_timeout", float, "seconds to wait for a connection (default 10)"),
    ("retries", int, "connection attempts (default 3)"),
    ("probe_timeout", float, "seconds a node has to answer a probe (default 3)"),
    ("setup_timeout", float, "seconds node setup may take (default 3600)"),
    ("keepalive", float, "seconds between SSH keep-alives (default 15)"),
    ("io_timeout", float, "seconds a share read may wait for a live, slow host (default 30)"),
)


def _ssh_node_arguments(p: argparse.ArgumentParser) -> None:
    for option, kind, text in SSH_FLAGS:
        p.add_argument("--" + option.replace("_", "-"), type=kind, help=f"ssh: {text}")
    p.add_argument(
        "--mpi-args",
        metavar="'ARGS'",
        help="ssh: more mpirun arguments, one string (--mpi-args='--mca btl ^openib')",
    )
    p.add_argument("--env", nargs="+", metavar="KEY=VALUE", help="ssh: environment variables of every rank")


def _ssh_node_options(args: argparse.Namespace) -> dict[str, Any]:
    options = {option: getattr(args, option) for option, _, _ in SSH_FLAGS}
    if args.mpi_args is not None:
        options["mpi_args"] = shlex.split(args.mpi_args)
    if args.env:
        env = {}
        for item in args.env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise UsageError(f"--env takes KEY=VALUE; got {item!r}")
            env[key] = value
        options["env"] = env
    return options


def configure(ctx: Context, args: argparse.Namespace) -> Result | None:
    data = ctx.profile.data
    changed = False
    if args.backend:
        data["backend"] = args.backend
        changed = True
    local_root = args.local_root
    if local_root is None and getattr(args, "root", None):  # this command's --root before --local-root
        ctx.note("batchai configure --root is now --local-root (--root names one workspace's folder)")
        local_root = args.root
    sections = {
        "local": {"root": local_root},
        "ssh": {
            "hosts": args.hosts,
            "user": args.user,
            "key_file": args.key_file,
            "share_root": args.share_root,
            "port": args.port,
            "known_hosts": args.known_hosts,
            "trust_on_first_use": args.trust_on_first_use,
            "jump_host": args.jump_host,
            **_ssh_node_options(args),
        },
        "azure": {"subscription_id": args.subscription, "location": args.location},
        "slurm": {
            "share_root": args.share_root,
            "partition": args.partition,
            "account": args.account,
            "login_host": args.login_host,
            "user": args.user,
            "key_file": args.key_file,
        },
    }
    # --share-root, --user and --key-file serve the ssh and the slurm backend: they go to the one in use
    shared = "slurm" if (args.backend or data.get("backend")) == "slurm" else "ssh"
    sections["slurm" if shared == "ssh" else "ssh"] = {
        k: v
        for k, v in sections["slurm" if shared == "ssh" else "ssh"].items()
        if k not in ("share_root", "user", "key_file")
    }
    for section, values in sections.items():
        for key, value in values.items():
            if value is not None:
                data.setdefault(section, {})[key] = value
                changed = True
    for item in args.defaults or ():
        key, sep, value = item.partition("=")
        if not sep or key not in ("group", "workspace", "experiment", "output"):
            raise UsageError(
                f"--defaults takes KEY=VALUE, KEY one of group, workspace, experiment, output; got {item!r}"
            )
        if key == "output" and value and value not in OUTPUT_FORMATS:
            raise UsageError(f"--defaults output={value}: expected one of {', '.join(OUTPUT_FORMATS)}")
        defaults = data.setdefault("defaults", {})
        if value:
            defaults[key] = value
        else:
            defaults.pop(key, None)
        changed = True
    if changed:
        ctx.profile.save()
    return Result({"path": str(ctx.profile.path), "backend": ctx.profile.backend, **data})
