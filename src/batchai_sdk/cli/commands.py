"""The command table: every ``batchai`` command, its arguments and its handler."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ._context import Handler
from ._params import Parser, _exp, _global_arguments, _non_negative, _positive, _rg, _seconds, _ws, _yes
from ._state import BACKENDS
from .cluster import cluster_create, cluster_delete, cluster_list, cluster_resize, cluster_show
from .configure import configure
from .experiment import experiment_create, experiment_delete, experiment_list, experiment_show
from .group import group_create, group_delete, group_exists, group_list, group_show
from .job import (
    job_create,
    job_delete,
    job_file_download,
    job_file_list,
    job_file_stream,
    job_list,
    job_show,
    job_terminate,
    job_wait,
)
from .storage import (
    storage_account_create,
    storage_account_delete,
    storage_account_list,
    storage_account_show,
    storage_directory_create,
    storage_file_download,
    storage_file_list,
    storage_file_upload,
    storage_share_create,
    storage_share_list,
)
from .workspace import workspace_create, workspace_delete, workspace_list, workspace_show


def build_parser() -> argparse.ArgumentParser:
    common = _global_arguments()
    root = Parser(
        prog="batchai",
        description="Azure Batch AI's az commands, client-side: the same flags with 'batchai' in place of "
        "'az batchai', and 'batchai storage' / 'batchai group' in place of 'az storage' / 'az group'.",
        parents=[common],
    )
    root.add_argument("--version", action="version", version=f"batchai {__version__}")
    groups = root.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)

    def leaf(
        parent: Any, name: str, handler: Handler, help_text: str, *, aliases: Sequence[str] = ()
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(
            name, help=help_text, description=help_text, parents=[common], aliases=list(aliases)
        )
        p.set_defaults(handler=handler)
        return p

    def branch(parent: Any, name: str, help_text: str) -> Any:
        p = parent.add_parser(name, help=help_text, description=help_text, parents=[common])
        return p.add_subparsers(dest=f"{name}_command", metavar="COMMAND", required=True, parser_class=Parser)

    # group
    g = branch(groups, "group", "resource groups: a name space of workspaces and storage accounts")
    p = leaf(g, "create", group_create, "create a resource group")
    p.add_argument("--name", "-n", "--resource-group", "-g", dest="name", required=True)
    p.add_argument("--location", "-l", required=True)
    p.add_argument("--tags", nargs="*", help="accepted and ignored")
    for name, handler, text in (
        ("show", group_show, "show a resource group"),
        ("exists", group_exists, "whether a resource group exists (true/false)"),
    ):
        p = leaf(g, name, handler, text)
        p.add_argument("--name", "-n", "--resource-group", "-g", dest="name", required=True)
    leaf(g, "list", group_list, "list resource groups")
    p = leaf(
        g,
        "delete",
        group_delete,
        "delete a resource group: its workspaces (clusters, jobs, files) and storage accounts",
    )
    p.add_argument("--name", "-n", "--resource-group", "-g", dest="name", required=True)
    p.add_argument("--no-wait", action="store_true", help="accepted; deletion is synchronous")
    _yes(p)

    # batchai workspace / experiment / cluster / job
    w = branch(groups, "workspace", "workspaces")
    p = leaf(w, "create", workspace_create, "create a workspace (returns the existing one if it exists)")
    _rg(p)
    _ws(p, "--name", "-n")
    p.add_argument("--location", "-l", help="default: the resource group's")
    p.add_argument("--backend", choices=BACKENDS, help="default: the profile's backend (local if none)")
    for name, handler, text in (("show", workspace_show, "show a workspace"),):
        p = leaf(w, name, handler, text)
        _rg(p)
        _ws(p, "--name", "-n")
    p = leaf(w, "list", workspace_list, "list workspaces (of one resource group with -g)")
    _rg(p)
    p = leaf(w, "delete", workspace_delete, "delete a workspace with its clusters, experiments and files")
    _rg(p)
    _ws(p, "--name", "-n")
    p.add_argument("--force", action="store_true", help="terminate running jobs")
    _yes(p)

    e = branch(groups, "experiment", "experiments: named groups of jobs")
    for name, handler, text in (
        ("create", experiment_create, "create an experiment (returns the existing one if it exists)"),
        ("show", experiment_show, "show an experiment"),
        ("delete", experiment_delete, "delete an experiment and its jobs"),
    ):
        p = leaf(e, name, handler, text)
        _rg(p)
        _ws(p)
        p.add_argument("--name", "-n", required=True)
        if name == "delete":
            p.add_argument("--force", action="store_true", help="terminate jobs that have not ended")
            _yes(p)
    p = leaf(e, "list", experiment_list, "list experiments")
    _rg(p)
    _ws(p)

    c = branch(groups, "cluster", "clusters of nodes")
    p = leaf(c, "create", cluster_create, "create a cluster")
    _rg(p)
    _ws(p)
    p.add_argument("--name", "-n", required=True)
    p.add_argument("--vm-size", "-s", required=True, help="e.g. Standard_NC6")
    p.add_argument("--vm-priority", choices=("dedicated", "lowpriority"), default="dedicated")
    p.add_argument("--target", "-t", type=_non_negative, default=1, help="number of nodes (default 1)")
    p.add_argument("--image", "-i", help="node image (backend-specific)")
    p.add_argument("--setup-task", help="command line run on each node when it is set up")
    p.add_argument("--generate-ssh-keys", action="store_true", help="accepted; see the note it prints")
    p.add_argument("--user-name", "-u", help="accepted; see the note it prints")
    p.add_argument("--ssh-key", "-k", help="accepted; see the note it prints")
    p.add_argument("--password", "-p", help="accepted and ignored (never stored)")
    for name, handler, text in (("show", cluster_show, "show a cluster"),):
        p = leaf(c, name, handler, text)
        _rg(p)
        _ws(p)
        p.add_argument("--name", "-n", required=True)
    p = leaf(c, "list", cluster_list, "list clusters")
    _rg(p)
    _ws(p)
    p = leaf(c, "resize", cluster_resize, "change a cluster's number of nodes (0 releases them all)")
    _rg(p)
    _ws(p)
    p.add_argument("--name", "-n", required=True)
    p.add_argument("--target", "-t", type=_non_negative, required=True)
    p = leaf(c, "delete", cluster_delete, "delete a cluster")
    _rg(p)
    _ws(p)
    p.add_argument("--name", "-n", required=True)
    p.add_argument("--force", action="store_true", help="terminate its running jobs")
    _yes(p)

    j = branch(groups, "job", "training jobs")
    p = leaf(j, "create", job_create, "create and submit a job from a Batch AI job.json (or flags)")
    _rg(p)
    _ws(p)
    _exp(p)
    p.add_argument("--name", "-n", required=True)
    p.add_argument("--cluster", "-c", required=True)
    p.add_argument("--config-file", "-f", help="Batch AI 2018-05-01 job.json")
    p.add_argument("--nodes", type=_positive, help="number of nodes; overrides nodeCount of the file")
    p.add_argument(
        "--storage-account-name",
        help="fills <AZURE_BATCHAI_STORAGE_ACCOUNT> (default: "
        "$AZURE_BATCHAI_STORAGE_ACCOUNT, else the resource group's only storage account)",
    )
    p.add_argument(
        "--storage-account-key",
        help="fills <AZURE_BATCHAI_STORAGE_KEY> (default: $AZURE_BATCHAI_STORAGE_KEY); never stored",
    )
    p.add_argument(
        "--python-script",
        help="without --config-file: the Horovod script (a local file, a "
        "$AZ_BATCHAI_JOB_MOUNT_ROOT/... share path or a module name)",
    )
    p.add_argument("--script-args", help="without --config-file: the script's arguments, one string")
    p.add_argument("--command-line", help="without --config-file: a custom MPI command line")
    p.add_argument("--process-count", type=_positive, help="without --config-file: number of ranks")
    p.add_argument("--job-preparation", help="without --config-file: command run once per node first")
    for name, handler, text in (("show", job_show, "show a job"),):
        p = leaf(j, name, handler, text)
        _rg(p)
        _ws(p)
        _exp(p)
        p.add_argument("--name", "-n", required=True)
    p = leaf(j, "list", job_list, "list an experiment's jobs")
    _rg(p)
    _ws(p)
    _exp(p)
    p = leaf(j, "wait", job_wait, "wait for a job to end; the exit status is the job's exit code")
    _rg(p)
    _ws(p)
    _exp(p)
    p.add_argument("--name", "-n", required=True)
    p.add_argument("--interval", type=_seconds, default=2.0, help="seconds between polls (default 2)")
    p.add_argument("--timeout", type=_seconds, help="give up after this many seconds")
    p = leaf(j, "terminate", job_terminate, "terminate a job")
    _rg(p)
    _ws(p)
    _exp(p)
    p.add_argument("--name", "-n", required=True)
    p.add_argument("--no-wait", action="store_true", help="return without waiting for the ranks to stop")
    _yes(p)
    p = leaf(j, "delete", job_delete, "delete a job with its logs and outputs")
    _rg(p)
    _ws(p)
    _exp(p)
    p.add_argument("--name", "-n", required=True)
    p.add_argument("--force", action="store_true", help="terminate it first if it has not ended")
    _yes(p)
    jf = branch(j, "file", "a job's files: logs (stdouterr) and output directories")
    for name, handler, text in (
        ("list", job_file_list, "list a job's files"),
        ("stream", job_file_stream, "print a job file as it grows, until the job ends"),
        ("download", job_file_download, "download a job file"),
    ):
        p = leaf(jf, name, handler, text)
        _rg(p)
        _ws(p)
        _exp(p)
        p.add_argument("--job", "-j", required=True)
        p.add_argument(
            "--output-directory-id",
            "-d",
            default="stdouterr",
            help="'stdouterr' (default) or an output directory id",
        )
        p.add_argument("--path", "-p", default="", help="a folder inside that directory")
        if name != "list":
            p.add_argument("--file-name", "-f", required=True)
        if name == "download":
            p.add_argument("--dest", help="file or folder to write (default: the working directory)")

    # storage
    s = branch(groups, "storage", "names for the workspaces' file shares, as az storage")
    sa = branch(s, "account", "storage accounts")
    p = leaf(sa, "create", storage_account_create, "create a storage account name in a resource group")
    _rg(p)
    p.add_argument("--name", "-n", required=True)
    p.add_argument("--location", "-l")
    p.add_argument("--sku", default="Standard_LRS")
    p.add_argument("--kind", default="StorageV2")
    for name, handler, text in (
        ("show", storage_account_show, "show a storage account"),
        ("delete", storage_account_delete, "forget a storage account name"),
    ):
        p = leaf(sa, name, handler, text)
        _rg(p)
        p.add_argument("--name", "-n", required=True)
        if name == "delete":
            _yes(p)
    p = leaf(sa, "list", storage_account_list, "list storage accounts")
    _rg(p)

    def account_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--account-name", help="storage account (default: $AZURE_STORAGE_ACCOUNT)")
        p.add_argument("--account-key", help="accepted and ignored (never stored)")
        p.add_argument("--connection-string", help="accepted and ignored (never stored)")
        p.add_argument("--auth-mode", help="accepted and ignored")

    ss = branch(s, "share", "file shares: each is a workspace's share")
    p = leaf(ss, "create", storage_share_create, "name a workspace's file share")
    p.add_argument("--name", "-n", required=True)
    p.add_argument("--workspace", "-w", help="whose share (default: the resource group's only workspace)")
    p.add_argument("--quota", type=int, help="accepted and ignored")
    account_args(p)
    p = leaf(ss, "list", storage_share_list, "list a storage account's shares")
    account_args(p)
    sd = branch(s, "directory", "directories on a share")
    p = leaf(sd, "create", storage_directory_create, "create a directory on a share")
    p.add_argument("--name", "-n", required=True)
    p.add_argument("--share-name", "-s", required=True)
    account_args(p)
    sf = branch(s, "file", "files on a share")
    p = leaf(sf, "upload", storage_file_upload, "upload a file (a directory --path receives it by name)")
    p.add_argument("--source", required=True)
    p.add_argument("--path", "-p", help="path on the share (a directory, or the file's new path)")
    p.add_argument("--share-name", "-s", required=True)
    account_args(p)
    p = leaf(sf, "download", storage_file_download, "download a file (into the working directory by default)")
    p.add_argument("--path", "-p", required=True)
    p.add_argument("--dest", help="file or directory to write (default: the working directory)")
    p.add_argument("--share-name", "-s", required=True)
    account_args(p)
    p = leaf(sf, "list", storage_file_list, "list a directory of a share")
    p.add_argument("--path", "-p", default="")
    p.add_argument("--share-name", "-s", required=True)
    account_args(p)

    # configure
    p = leaf(groups, "configure", configure, "the profile: backend for new workspaces, its options, defaults")
    p.add_argument("--backend", choices=BACKENDS, help="backend of workspaces created from now on")
    p.add_argument(
        "--root", help="local: folder holding the local workspaces (default: $BATCHAI_HOME/groups)"
    )
    p.add_argument("--hosts", nargs="+", help="ssh: the nodes' addresses; the first is the head node")
    p.add_argument("--user", help="ssh: user on the nodes")
    p.add_argument("--key-file", help="ssh: private key file (its path is stored, never its content)")
    p.add_argument(
        "--share-root", help="ssh: a folder every node sees; workspaces go below <root>/<group>/<ws>"
    )
    p.add_argument("--port", type=_positive, help="ssh: port (default 22)")
    p.add_argument("--known-hosts", help="ssh: known_hosts file of the nodes")
    p.add_argument(
        "--trust-on-first-use", action="store_true", default=None, help="ssh: pin unknown host keys"
    )
    p.add_argument("--jump-host", help="ssh: user@host to reach the nodes through")
    p.add_argument("--subscription", help="azure: subscription id")
    p.add_argument("--location", "-l", help="azure: region of new workspaces (default: the group's)")
    p.add_argument(
        "--defaults",
        nargs="+",
        metavar="KEY=VALUE",
        help="defaults for group, workspace, experiment, output; KEY= clears one",
    )
    return root
