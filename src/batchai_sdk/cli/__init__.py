"""``batchai``: the Batch AI tutorial's ``az batchai``, ``az storage`` and ``az group`` commands, on the SDK.

A thin layer: every command opens a ``Workspace`` and calls its public API. Resource
groups, the backend of each workspace and the storage-account names live in ``$BATCHAI_HOME``
(see :mod:`batchai_sdk.cli._state`); output follows az (:mod:`batchai_sdk.cli._format`). Errors print one
line, ``error: ...``, and exit 1 (2 for a command line that cannot run); ``--debug`` adds the traceback.
docs/cli.md lists every command beside its az original.
"""

from __future__ import annotations

import argparse
import logging
import os
import posixpath
import shlex
import shutil
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .. import __version__
from .._models import FileInfo, JobState, utcnow, validate_name
from ..batchai_json import parse_job_json
from ..exceptions import AlreadyExistsError, BatchAIError, NotFoundError
from ..share import join, normalize
from ._format import OUTPUT_FORMATS, Row, TableLayout, compile_query, render
from ._state import (
    BACKENDS,
    Profile,
    Registry,
    batchai_home,
    validate_account,
    validate_group,
    validate_share,
)

if TYPE_CHECKING:
    from ..cluster import Cluster
    from ..experiment import Experiment
    from ..job import Job
    from ..workspace import Workspace

__all__ = ["build_parser", "main"]

log = logging.getLogger("batchai_sdk.cli")


class UsageError(Exception):
    """The command line cannot run as given (exit status 2)."""


class Cancelled(Exception):
    """The user answered no to a confirmation."""


@dataclass
class Result:
    value: Any
    table: TableLayout | None = None
    exit_code: int = 0


Handler = Callable[["Context", argparse.Namespace], "Result | None"]


# ------------------------------------------------------------------------------------------------------
# context: profile, registry, opened workspaces


class Context:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.home = batchai_home()
        self.profile = Profile(self.home)
        self.registry = Registry(self.home)
        self._opened: list[Workspace] = []

    def close(self) -> None:
        for ws in self._opened:
            ws.close()

    @staticmethod
    def note(text: str) -> None:
        print(f"note: {text}", file=sys.stderr)

    def confirm(self, what: str) -> None:
        if getattr(self.args, "yes", False):
            return
        if not sys.stdin or not sys.stdin.isatty():
            raise UsageError(f"refusing to {what} without confirmation: no terminal to ask on; add --yes")
        answer = input(f"Are you sure you want to {what}? (y/n): ")
        if answer.strip().lower() not in ("y", "yes"):
            raise Cancelled

    def _required(self, attr: str, flag: str, default_key: str) -> str:
        value = getattr(self.args, attr, None) or self.profile.default(default_key)
        if not value:
            raise UsageError(
                f"{flag} is required (or set a default: batchai configure --defaults {default_key}=NAME)"
            )
        return str(value)

    def group(self) -> str:
        return validate_group(self._required("resource_group", "--resource-group/-g", "group"))

    def workspace_name(self) -> str:
        return validate_name(self._required("workspace", "--workspace/-w", "workspace"), "workspace name")

    def experiment_name(self) -> str:
        return self._required("experiment", "--experiment/-e", "experiment")

    def optional_group(self) -> str | None:
        value = getattr(self.args, "resource_group", None) or self.profile.default("group")
        return validate_group(value) if value else None

    def open_workspace(
        self, group: str | None = None, name: str | None = None, *, entry: dict[str, Any] | None = None
    ) -> Workspace:
        """Workspace ``name`` of ``group``, closed when the command ends (``entry``: not registered yet)."""
        group = group or self.group()
        name = name or self.workspace_name()
        ws = open_workspace(entry or self.registry.workspace_entry(group, name), group, name)
        self._opened.append(ws)
        return ws

    def experiment(self) -> tuple[str, Workspace, Experiment]:
        group = self.group()
        ws = self.open_workspace(group)
        return group, ws, ws.get_experiment(self.experiment_name())


def open_workspace(entry: dict[str, Any], group: str, name: str) -> Workspace:
    """The workspace a registry entry describes, on the backend it was created with."""
    from ..workspace import Workspace

    kind = entry.get("backend")
    options = dict(entry.get("options") or {})
    if kind == "local":
        return Workspace.local(root=options.pop("root"), name=name)
    if kind == "ssh":
        return Workspace.ssh(name, **options)
    if kind == "azure":
        return Workspace.azure(name, resource_group=group, **options)
    raise BatchAIError(f"workspace {name!r} in resource group {group!r} has an unknown backend {kind!r}")


# ------------------------------------------------------------------------------------------------------
# views (the JSON each command prints) and table layouts (the tutorial's columns)


def _items(result: Any) -> list[dict[str, Any]]:
    items = result if isinstance(result, list) else [result]
    return [i for i in items if isinstance(i, dict)]


def cluster_view(cluster: Cluster, group: str) -> dict[str, Any]:
    data = cluster.to_dict()
    return {"name": data.pop("name"), "resourceGroup": group, **data}


def cluster_table(result: Any) -> list[Row]:
    rows = []
    for c in _items(result):
        counts = c.get("nodeStateCounts") or {}
        rows.append(
            {
                "Name": c.get("name"),
                "Resource Group": c.get("resourceGroup"),
                "Workspace": c.get("workspace"),
                "VM Size": c.get("vmSize"),
                "State": c.get("allocationState"),
                "Idle": counts.get("idleNodeCount"),
                "Running": counts.get("runningNodeCount"),
                "Preparing": counts.get("preparingNodeCount"),
                "Leaving": counts.get("leavingNodeCount"),
                "Unusable": counts.get("unusableNodeCount"),
            }
        )
    return rows


def job_view(job: Job, group: str) -> dict[str, Any]:
    data = job.to_dict()
    return {"name": data.pop("name"), "resourceGroup": group, "workspace": job.workspace.name, **data}


def job_table(result: Any) -> list[Row]:
    return [
        {
            "Name": j.get("name"),
            "Resource Group": j.get("resourceGroup"),
            "Cluster": j.get("cluster"),
            "Cluster RG": j.get("resourceGroup"),
            "Nodes": j.get("nodeCount"),
            "State": j.get("executionState"),
            "Exit code": j.get("exitCode"),
        }
        for j in _items(result)
    ]


def file_view(info: FileInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "type": info.type,
        "size": info.size,
        "modified": info.modified.replace(microsecond=0).isoformat() if info.modified else None,
    }


def file_table(result: Any) -> list[Row]:
    return [
        {"Name": f.get("name"), "Type": f.get("type"), "Size": f.get("size"), "Modified": f.get("modified")}
        for f in _items(result)
    ]


def experiment_view(exp: Experiment, group: str) -> dict[str, Any]:
    data = exp.to_dict()
    return {"name": data.pop("name"), "resourceGroup": group, **data}


def experiment_table(result: Any) -> list[Row]:
    return [
        {"Name": e.get("name"), "Resource Group": e.get("resourceGroup"), "Workspace": e.get("workspace")}
        for e in _items(result)
    ]


def workspace_view(ws: Workspace, group: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    details = {k: v for k, v in ws.to_dict().items() if k not in ("name", "kind", "workspace")}
    return {
        "name": ws.name,
        "resourceGroup": group["name"],
        "location": entry.get("options", {}).get("location") or group.get("location"),
        "backend": entry.get("backend"),
        "provisioningState": "succeeded",
        "creationTime": entry.get("created"),
        **details,
    }


def workspace_table(result: Any) -> list[Row]:
    return [
        {
            "Name": w.get("name"),
            "Resource Group": w.get("resourceGroup"),
            "Location": w.get("location"),
            "Backend": w.get("backend"),
        }
        for w in _items(result)
    ]


def group_view(group: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": group["name"],
        "location": group.get("location"),
        "properties": {"provisioningState": "Succeeded"},
        "workspaces": sorted(group.get("workspaces", {})),
        "storageAccounts": sorted(group.get("storageAccounts", {})),
    }


def group_table(result: Any) -> list[Row]:
    return [
        {"Name": g.get("name"), "Location": g.get("location"), "Status": "Succeeded"} for g in _items(result)
    ]


def account_view(group: dict[str, Any], account: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": account["name"],
        "resourceGroup": group["name"],
        "location": account.get("location"),
        "sku": {"name": account.get("sku")},
        "kind": account.get("kind"),
        "provisioningState": "Succeeded",
        "primaryEndpoints": {"file": f"https://{account['name']}.file.core.windows.net/"},
        "shares": dict(account.get("shares", {})),
    }


def account_table(result: Any) -> list[Row]:
    return [
        {
            "Name": a.get("name"),
            "Resource Group": a.get("resourceGroup"),
            "Location": a.get("location"),
            "Sku": (a.get("sku") or {}).get("name"),
        }
        for a in _items(result)
    ]


# ------------------------------------------------------------------------------------------------------
# group


def group_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    data = ctx.registry.create_group(validate_group(args.name), args.location)
    return Result(group_view(data), group_table)


def group_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    return Result(group_view(ctx.registry.get_group(validate_group(args.name))), group_table)


def group_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    return Result([group_view(g) for g in ctx.registry.list_groups()], group_table)


def group_exists(ctx: Context, args: argparse.Namespace) -> Result | None:
    return Result(ctx.registry.group_exists(validate_group(args.name)))


def group_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    name = validate_group(args.name)
    data = ctx.registry.get_group(name)
    workspaces = sorted(data.get("workspaces", {}))
    ctx.confirm(
        f"delete resource group {name!r} and its workspaces ({', '.join(workspaces) or 'none'}), "
        "clusters, jobs and files"
    )
    for ws_name in workspaces:
        entry = data["workspaces"][ws_name]
        ws = ctx.open_workspace(name, ws_name)
        ws.delete(force=True)
        if entry.get("backend") == "local":
            shutil.rmtree(entry["options"]["root"], ignore_errors=True)
        if entry.get("backend") == "ssh":
            ctx.note(
                f"workspace {ws_name!r}: files on the SSH share stay at {entry['options'].get('share_path')}"
            )
    ctx.registry.remove_group(name)
    return None


# ------------------------------------------------------------------------------------------------------
# workspace


def _new_workspace_entry(
    ctx: Context, kind: str, group: dict[str, Any], name: str, location: str | None
) -> dict[str, Any]:
    options = ctx.profile.options(kind)
    if kind == "local":
        base = options.get("root")
        root = (
            Path(base).expanduser() / group["name"] / name
            if base
            else ctx.registry.local_root(group["name"], name)
        )
        options = {"root": str(root)}
    elif kind == "ssh":
        missing = [k for k in ("hosts", "user", "share_root") if not options.get(k)]
        if missing:
            raise UsageError(
                "the ssh backend needs "
                + ", ".join(f"--{m.replace('_', '-')}" for m in missing)
                + " in the profile: batchai configure --backend ssh --hosts H1 H2 --user U --key-file F "
                "--share-root /mnt/share"
            )
        share_root = str(options.pop("share_root")).rstrip("/")
        options["share_path"] = f"{share_root}/{group['name']}/{name}"
        options["hosts"] = list(options["hosts"])
    elif kind == "azure":
        options["location"] = location or options.get("location") or group.get("location")
    return {"backend": kind, "options": options, "created": utcnow().isoformat()}


def workspace_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group_name = ctx.group()
    group = ctx.registry.get_group(group_name)
    name = ctx.workspace_name()
    entry = group.setdefault("workspaces", {}).get(name)
    if entry is None:
        kind = args.backend or ctx.profile.backend
        entry = _new_workspace_entry(ctx, kind, group, name, args.location)
        try:
            ws = ctx.open_workspace(group_name, name, entry=entry)
        except NotFoundError as exc:
            if kind != "ssh":
                raise
            where = f"{entry['options']['share_path']} on {entry['options']['hosts'][0]}"
            raise BatchAIError(
                f"the workspace's share folder {where} could not be used ({exc}); create it on the shared "
                "file system (mkdir -p) and run this again"
            ) from exc
        group["workspaces"][name] = entry
        ctx.registry.save_group(group)
    else:  # creating an existing workspace returns it, as ARM's PUT did
        ws = ctx.open_workspace(group_name, name)
    return Result(workspace_view(ws, group, entry), workspace_table)


def workspace_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group_name = ctx.group()
    name = ctx.workspace_name()
    group = ctx.registry.get_group(group_name)
    entry = ctx.registry.workspace_entry(group_name, name)
    return Result(workspace_view(ctx.open_workspace(group_name, name), group, entry), workspace_table)


def workspace_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    only = ctx.optional_group()
    groups = [ctx.registry.get_group(only)] if only else ctx.registry.list_groups()
    out = []
    for group in groups:
        for name, entry in sorted(group.get("workspaces", {}).items()):
            out.append(
                {
                    "name": name,
                    "resourceGroup": group["name"],
                    "location": entry.get("options", {}).get("location") or group.get("location"),
                    "backend": entry.get("backend"),
                    "creationTime": entry.get("created"),
                }
            )
    return Result(out, workspace_table)


def workspace_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group_name = ctx.group()
    name = ctx.workspace_name()
    entry = ctx.registry.workspace_entry(group_name, name)
    ctx.confirm(f"delete workspace {name!r} with its clusters, experiments and files")
    ctx.open_workspace(group_name, name).delete(force=args.force)
    group = ctx.registry.get_group(group_name)
    group["workspaces"].pop(name, None)
    for account in group.get("storageAccounts", {}).values():
        account["shares"] = {s: w for s, w in account.get("shares", {}).items() if w != name}
    ctx.registry.save_group(group)
    if entry.get("backend") == "local":
        shutil.rmtree(entry["options"]["root"], ignore_errors=True)
    return None


# ------------------------------------------------------------------------------------------------------
# experiment


def experiment_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    ws = ctx.open_workspace(group)
    exp = ws.create_experiment(args.name, exist_ok=True)
    return Result(experiment_view(exp, group), experiment_table)


def experiment_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    return Result(
        experiment_view(ctx.open_workspace(group).get_experiment(args.name), group), experiment_table
    )


def experiment_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    return Result(
        [experiment_view(e, group) for e in ctx.open_workspace(group).list_experiments()], experiment_table
    )


def experiment_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    ws = ctx.open_workspace(group)
    ws.get_experiment(args.name)
    ctx.confirm(f"delete experiment {args.name!r} and its jobs")
    ws.delete_experiment(args.name, force=args.force)
    return None


# ------------------------------------------------------------------------------------------------------
# cluster


def cluster_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    ws = ctx.open_workspace(group)
    kind = ws.backend.kind
    where = {
        "local": "its nodes are this machine",
        "ssh": "nodes are reached with the key file of the workspace's profile",
        "azure": "the azure backend makes and keeps the cluster's SSH key itself",
    }.get(kind, "")
    if args.generate_ssh_keys:
        ctx.note(f"--generate-ssh-keys has no effect on the {kind} backend ({where})")
    for flag, value in (
        ("--user-name", args.user_name),
        ("--ssh-key", args.ssh_key),
        ("--password", args.password),
    ):
        if value:
            ctx.note(f"{flag} is ignored on the {kind} backend ({where})")
    cluster = ws.create_cluster(
        args.name,
        vm_size=args.vm_size,
        nodes=args.target,
        vm_priority=args.vm_priority,
        image=args.image,
        node_setup=args.setup_task,
    )
    return Result(cluster_view(cluster, group), cluster_table)


def cluster_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    return Result(cluster_view(ctx.open_workspace(group).get_cluster(args.name), group), cluster_table)


def cluster_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    return Result([cluster_view(c, group) for c in ctx.open_workspace(group).list_clusters()], cluster_table)


def cluster_resize(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    cluster = ctx.open_workspace(group).get_cluster(args.name).resize(args.target)
    return Result(cluster_view(cluster, group), cluster_table)


def cluster_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    ws = ctx.open_workspace(group)
    ws.get_cluster(args.name)
    ctx.confirm(f"delete cluster {args.name!r}" + (" and terminate its jobs" if args.force else ""))
    ws.delete_cluster(args.name, force=args.force)
    return None


# ------------------------------------------------------------------------------------------------------
# job


def _storage_account_for(ctx: Context, args: argparse.Namespace, group: str) -> str | None:
    """--storage-account-name, else $AZURE_BATCHAI_STORAGE_ACCOUNT, else the group's only storage account."""
    if args.storage_account_name:
        return str(args.storage_account_name)
    env = os.environ.get("AZURE_BATCHAI_STORAGE_ACCOUNT")
    if env:
        return env
    accounts = list(ctx.registry.get_group(group).get("storageAccounts", {}))
    return accounts[0] if len(accounts) == 1 else None


def job_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, _, exp = ctx.experiment()
    convenience = {
        "--python-script": args.python_script,
        "--script-args": args.script_args,
        "--command-line": args.command_line,
        "--job-preparation": args.job_preparation,
        "--process-count": args.process_count,
    }
    given = [flag for flag, value in convenience.items() if value is not None]
    if args.config_file:
        if given:
            raise UsageError(
                f"{', '.join(given)} cannot be combined with --config-file (put them in the file)"
            )
        spec = parse_job_json(
            Path(args.config_file).expanduser(),
            name=args.name,
            experiment=exp.name,
            cluster=args.cluster,
            storage_account=_storage_account_for(ctx, args, group),
            storage_key=args.storage_account_key or os.environ.get("AZURE_BATCHAI_STORAGE_KEY"),
        )
        if args.nodes is not None:
            spec = spec.replace(node_count=args.nodes)
        job = exp.job_from_spec(spec)
    else:
        if args.python_script is None and args.command_line is None:
            raise UsageError(
                "give --config-file, or --python-script (Horovod) or --command-line (custom MPI)"
            )
        if args.python_script is not None and args.command_line is not None:
            raise UsageError("give either --python-script or --command-line, not both")
        job = exp.create_job(
            args.name,
            cluster=args.cluster,
            node_count=args.nodes or 1,
            python_script=args.python_script,
            args=shlex.split(args.script_args or ""),
            command_line=args.command_line,
            process_count=args.process_count,
            job_preparation=args.job_preparation,
        )
    job.submit()
    return Result(job_view(job, group), job_table)


def _job(ctx: Context, name: str) -> tuple[str, Job]:
    group, _, exp = ctx.experiment()
    return group, exp.get_job(name)


def job_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, job = _job(ctx, args.name)
    return Result(job_view(job, group), job_table)


def job_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, _, exp = ctx.experiment()
    return Result([job_view(j, group) for j in exp.list_jobs()], job_table)


def job_wait(ctx: Context, args: argparse.Namespace) -> Result | None:
    """Like az: blocks until the job ends; the exit status is the job's exit code."""
    group, job = _job(ctx, args.name)
    state = job.wait(timeout=args.timeout, poll_interval=args.interval)
    code = 0 if state is JobState.SUCCEEDED else (job.exit_code or 1)
    return Result(job_view(job, group), job_table, exit_code=code)


def job_terminate(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, job = _job(ctx, args.name)
    ctx.confirm(f"terminate job {args.name!r}")
    job.terminate(wait=not args.no_wait)
    return Result(job_view(job, group), job_table)


def job_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, job = _job(ctx, args.name)
    ctx.confirm(f"delete job {args.name!r} with its logs and outputs")
    job.delete(force=args.force)
    return None


def job_file_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, job = _job(ctx, args.job)
    files = job.files(args.path or "", directory=args.output_directory_id)
    return Result([file_view(f) for f in files], file_table)


def job_file_stream(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, job = _job(ctx, args.job)
    name = join(args.path or "", args.file_name)
    for line in job.stream(name, follow=True, directory=args.output_directory_id):
        print(line, flush=True)
    return None


def job_file_download(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, job = _job(ctx, args.job)
    name = join(args.path or "", args.file_name)
    local = job.download(
        name, Path(args.dest).expanduser() if args.dest else Path.cwd(), directory=args.output_directory_id
    )
    return Result({"path": str(local), "size": local.stat().st_size if local.is_file() else None})


# ------------------------------------------------------------------------------------------------------
# storage: names for the workspace's share


def storage_account_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group_name = ctx.group()
    name = validate_account(args.name)
    group = ctx.registry.get_group(group_name)
    try:
        owner, account = ctx.registry.find_account(name)
    except NotFoundError:
        owner, account = group, None
    if owner["name"] != group_name:
        raise AlreadyExistsError(
            "storage account", name, f"resource group {owner['name']!r} (names are global)"
        )
    if account is None:
        account = {
            "name": name,
            "location": args.location or group.get("location"),
            "sku": args.sku,
            "kind": args.kind,
            "created": utcnow().isoformat(),
            "shares": {},
        }
        group.setdefault("storageAccounts", {})[name] = account
        ctx.registry.save_group(group)
    return Result(account_view(group, account), account_table)


def storage_account_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, account = ctx.registry.find_account(validate_account(args.name))
    return Result(account_view(group, account), account_table)


def storage_account_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    only = ctx.optional_group()
    out = [
        account_view(g, a)
        for g in ctx.registry.list_groups()
        if only is None or g["name"] == only
        for _, a in sorted(g.get("storageAccounts", {}).items())
    ]
    return Result(out, account_table)


def storage_account_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, _ = ctx.registry.find_account(validate_account(args.name))
    ctx.confirm(
        f"delete storage account {args.name!r} (the workspaces' files stay: they belong to the workspaces)"
    )
    group["storageAccounts"].pop(args.name, None)
    ctx.registry.save_group(group)
    return None


def _account(ctx: Context, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    name = args.account_name or os.environ.get("AZURE_STORAGE_ACCOUNT")
    if not name:
        raise UsageError("--account-name is required (or set AZURE_STORAGE_ACCOUNT)")
    return ctx.registry.find_account(validate_account(name))


def _share(ctx: Context, args: argparse.Namespace) -> Workspace:
    """The workspace whose share ``--share-name`` of ``--account-name`` names."""
    group, account = _account(ctx, args)
    share = validate_share(args.share_name)
    ws_name = account.get("shares", {}).get(share)
    if ws_name is None:
        raise NotFoundError(
            "share",
            share,
            f"storage account {account['name']!r} (create it with: batchai storage share create "
            f"--name {share} --account-name {account['name']})",
        )
    return ctx.open_workspace(group["name"], ws_name)


def storage_share_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, account = _account(ctx, args)
    share = validate_share(args.name)
    if share in account.get("shares", {}):
        return Result({"created": False})
    workspaces = sorted(group.get("workspaces", {}))
    if args.workspace:
        ws_name = validate_name(args.workspace, "workspace name")
        if ws_name not in workspaces:
            raise NotFoundError("workspace", ws_name, f"resource group {group['name']!r}")
    elif len(workspaces) == 1:
        ws_name = workspaces[0]
    elif not workspaces:
        raise BatchAIError(
            f"resource group {group['name']!r} has no workspace whose share {share!r} could be; create one "
            f"first: batchai workspace create -g {group['name']} -w NAME"
        )
    else:
        raise UsageError(
            f"resource group {group['name']!r} has {len(workspaces)} workspaces ({', '.join(workspaces)}); "
            "say whose share this is with --workspace"
        )
    for other in group.get("storageAccounts", {}).values():
        for other_share, owner in other.get("shares", {}).items():
            if owner == ws_name:
                raise BatchAIError(
                    f"workspace {ws_name!r} has one file share, already named {other_share!r} in storage "
                    f"account {other['name']!r}; use that name"
                )
    account.setdefault("shares", {})[share] = ws_name
    ctx.registry.save_group(group)
    return Result({"created": True})


def storage_share_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, account = _account(ctx, args)
    return Result([{"name": s, "workspace": w} for s, w in sorted(account.get("shares", {}).items())])


def storage_directory_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args).share
    path = normalize(args.name)
    existed = share.exists(path)
    share.mkdir(path)
    return Result({"created": not existed})


def storage_file_upload(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args).share
    source = Path(args.source).expanduser()
    if not source.is_file():
        raise NotFoundError("local file", str(source))
    path = normalize(args.path or "")
    info = share.stat(path) if path else None
    if not path or args.path.endswith("/") or (info is not None and info.is_dir):
        path = join(path, source.name)  # az: a directory --path receives the file under its own name
    share.upload(source, path)
    stat = share.stat(path)
    return Result({"path": path, **(file_view(stat) if stat else {}), "name": posixpath.basename(path)})


def storage_file_download(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args).share
    dest = Path(args.dest).expanduser() if args.dest else Path.cwd()
    local = share.download(normalize(args.path), dest)
    return Result({"path": str(local), "size": local.stat().st_size if local.is_file() else None})


def storage_file_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args).share
    return Result([file_view(f) for f in share.list(normalize(args.path or ""))], file_table)


# ------------------------------------------------------------------------------------------------------
# configure


def configure(ctx: Context, args: argparse.Namespace) -> Result | None:
    data = ctx.profile.data
    changed = False
    if args.backend:
        data["backend"] = args.backend
        changed = True
    sections = {
        "local": {"root": args.root},
        "ssh": {
            "hosts": args.hosts,
            "user": args.user,
            "key_file": args.key_file,
            "share_root": args.share_root,
            "port": args.port,
            "known_hosts": args.known_hosts,
            "trust_on_first_use": args.trust_on_first_use,
            "jump_host": args.jump_host,
        },
        "azure": {"subscription_id": args.subscription, "location": args.location},
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


# ------------------------------------------------------------------------------------------------------
# parser


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _query_type(text: str) -> Any:
    try:
        return compile_query(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


_positive = _int_at_least(1)
_non_negative = _int_at_least(0)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text}")
    return value


def _global_arguments() -> argparse.ArgumentParser:
    """Accepted before or after the command, as in az (SUPPRESS: a subcommand does not reset them)."""
    parent = Parser(add_help=False)
    group = parent.add_argument_group("global arguments")
    group.add_argument(
        "--output",
        "-o",
        choices=OUTPUT_FORMATS,
        default=argparse.SUPPRESS,
        help="output format (default: json, or the profile's defaults.output)",
    )
    group.add_argument(
        "--query",
        type=_query_type,
        default=argparse.SUPPRESS,
        metavar="JMESPATH",
        help="JMESPath query applied to the result, as in az",
    )
    group.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="log everything; tracebacks"
    )
    group.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help="log progress")
    group.add_argument("--only-show-errors", action="store_true", default=argparse.SUPPRESS, help="no notes")
    return parent


def _rg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--resource-group",
        "-g",
        dest="resource_group",
        metavar="GROUP",
        help="resource group (default: the profile's defaults.group)",
    )


def _ws(p: argparse.ArgumentParser, *extra: str) -> None:
    p.add_argument(
        "--workspace",
        "-w",
        *extra,
        dest="workspace",
        metavar="WORKSPACE",
        help="workspace (default: the profile's defaults.workspace)",
    )


def _exp(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--experiment",
        "-e",
        dest="experiment",
        metavar="EXPERIMENT",
        help="experiment (default: the profile's defaults.experiment)",
    )


def _yes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")


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


# ------------------------------------------------------------------------------------------------------
# entry point


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def _setup_logging(args: argparse.Namespace) -> logging.Handler | None:
    """Log to stderr for --verbose/--debug; returns the handler so that main() removes it again."""
    level = (
        logging.DEBUG
        if getattr(args, "debug", False)
        else logging.INFO
        if getattr(args, "verbose", False)
        else None
    )
    if level is None:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("batchai_sdk")
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler


def run(args: argparse.Namespace) -> int:
    """Run a parsed command line; returns the exit status."""
    ctx = Context(args)
    if getattr(args, "only_show_errors", False):
        ctx.note = lambda text: None  # type: ignore[method-assign]
    try:
        result: Result | None = args.handler(ctx, args)
    finally:
        ctx.close()
    if result is None:
        return 0
    output = getattr(args, "output", None) or ctx.profile.default("output") or "json"
    text = render(result.value, output=output, query=getattr(args, "query", None), table=result.table)
    if text:
        print(text, flush=True)
    return result.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """``batchai ...``: returns the exit status (the console script exits with it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    handler: logging.Handler | None = None
    try:
        args = build_parser().parse_args(argv)
        handler = _setup_logging(args)
        return run(args)
    except UsageError as exc:
        _error(str(exc))
        return 2
    except Cancelled:
        print("Operation cancelled.", file=sys.stderr)
        return 1
    except BatchAIError as exc:
        if debug:
            traceback.print_exc()
        _error(str(exc))
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        return 1
    except OSError as exc:
        if debug:
            traceback.print_exc()
        where = f": {exc.filename}" if exc.filename else ""
        _error(f"{exc.strerror or exc}{where}")
        return 1
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        _error(f"unexpected {type(exc).__name__}: {exc} (run again with --debug for the traceback)")
        return 1
    finally:
        if handler is not None:
            logger = logging.getLogger("batchai_sdk")
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)


def console() -> None:
    sys.exit(main())


if __name__ == "__main__":
    console()
