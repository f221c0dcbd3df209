"""The Batch AI 2018-05-01 cluster.json -> the arguments of ``Workspace.create_cluster``.

``parse_cluster_json`` reads the file people wrote for ``az batchai cluster create -f cluster.json``.
As with the az CLI, flags given with the command override the file (``vmSize``, scale settings, image),
and Batch AI's own documentation writes files that leave ``vmSize`` to the command line. Every error names
the JSON path. What each field does on each backend is in docs/cluster-json.md:

* ``vmSize``, ``vmPriority``, ``scaleSettings`` (``manual.targetNodeCount`` or ``autoScale``),
  ``virtualMachineConfiguration.imageReference`` (``publisher:offer:sku:version``, or
  ``virtualMachineImageId``) and ``subnet.id`` (the Azure backend puts the nodes there) map onto the
  cluster spec.
* ``nodeSetup.setupTask``: its ``commandLine`` runs under bash (Batch AI ran it in a bash subshell) with its
  ``environmentVariables`` exported; its ``stdOutErrPathPrefix`` is checked, and the setup logs stay in
  the cluster's folder (a note says so). ``secrets`` become ``node_setup_secrets``: the backend keeps them
  in its secrets place (0600 files) for every node that joins; a KeyVault reference is refused.
* ``nodeSetup.mountVolumes``: the cluster's mounts (``batchai_json.mounts``, ``batchai_sdk.mounts``).
* ``nodeSetup.performanceCountersSettings`` (Application Insights) is ignored with a warning.
* ``userAccountSettings`` is checked; nodes are reached the way the backend reaches them (a note says how);
  the password is never stored.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._models import ENV_NAME_RE
from .mounts import parse_mount_volumes
from .older import CLUSTER_PROPERTIES_IGNORED, TOP_IGNORED
from .reading import _error, _invalid, _join, _load, _missing, _Reader

__all__ = ["CLUSTER_SCHEMA_URL", "ClusterJson", "parse_cluster_json"]

CLUSTER_SCHEMA_URL = "https://raw.githubusercontent.com/Azure/BatchAI/master/schemas/2018-05-01/cluster.json"
_SUBNET_RE = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/virtualNetworks/[^/]+"
    r"/subnets/[^/]+$",
    re.IGNORECASE,
)
_DEALLOCATION = ("requeue", "terminate", "waitforjobcompletion")
_PROPERTIES = (
    "vmSize",
    "vmPriority",
    "scaleSettings",
    "virtualMachineConfiguration",
    "nodeSetup",
    "userAccountSettings",
    "subnet",
)


@dataclass(frozen=True)
class ClusterJson:
    """What a cluster.json asks for: ``create_args``, keyword arguments of ``Workspace.create_cluster``
    (without the name), and ``notes``, what this SDK does differently from Batch AI, to show the user."""

    create_args: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def parse_cluster_json(
    source: str | os.PathLike[str] | Mapping[str, Any],
    *,
    backend: str = "local",
    storage_account: str | None = None,
    storage_key: str | None = None,
) -> ClusterJson:
    """The cluster a Batch AI 2018-05-01 cluster.json describes, for the ``backend`` kind it will be made on
    (``local``, ``ssh``, ``azure``, ``slurm``: the notes depend on it). ``source`` is a path, the JSON
    text or the parsed document; ``storage_account`` / ``storage_key`` fill the placeholders of
    ``mountVolumes``. Raises ``BatchAIJsonError`` naming the JSON path."""
    document, where = _load(source, "cluster.json")
    r = _Reader(storage_account, storage_key)
    r.fields_page = "docs/cluster-json.md"
    top = r.obj(document, "", ("$schema", "properties"), ignored=TOP_IGNORED)
    if "$schema" in top:
        r.string(top["$schema"], "$schema")
    if "properties" not in top:
        _missing(
            "properties", "an object with the cluster's settings (vmSize, scaleSettings, nodeSetup, ...)"
        )
    props = r.obj(top["properties"], "properties", _PROPERTIES, ignored=CLUSTER_PROPERTIES_IGNORED)
    args: dict[str, Any] = {}
    notes: list[str] = []
    if "vmSize" in props:
        args["vm_size"] = r.string(props["vmSize"], "properties.vmSize")
    if "vmPriority" in props:
        priority = r.string(props["vmPriority"], "properties.vmPriority")
        if priority.lower() not in ("dedicated", "lowpriority"):
            _invalid("properties.vmPriority", priority, "'dedicated' or 'lowpriority'")
        args["vm_priority"] = priority.lower()
    if "scaleSettings" in props:
        args.update(_scale(r, props["scaleSettings"], "properties.scaleSettings", notes))
    if "virtualMachineConfiguration" in props:
        args["image"] = _image(
            r, props["virtualMachineConfiguration"], "properties.virtualMachineConfiguration"
        )
    if "nodeSetup" in props:
        args.update(_node_setup(r, props["nodeSetup"], "properties.nodeSetup", notes))
        if "node_setup" in args and backend in _NO_SETUP:
            kept = "; its secrets are not kept" if args.pop("node_setup_secrets", None) else ""
            notes.append(f"setupTask: not run on the {backend} backend ({_NO_SETUP[backend]}){kept}")
    if "userAccountSettings" in props:
        _user_account(r, props["userAccountSettings"], "properties.userAccountSettings")
        notes.append(f"userAccountSettings: {_ACCESS.get(backend, _ACCESS['local'])}")
    if "subnet" in props:
        subnet = _subnet(r, props["subnet"], "properties.subnet")
        if backend == "azure":
            args["subnet"] = subnet
        else:
            notes.append(f"subnet: ignored on the {backend} backend (its nodes are where they are)")
    r.warn_ignored(where)
    return ClusterJson(args, tuple(notes))


_NO_SETUP = {
    "local": "its nodes are this machine",
    "slurm": "the partition's nodes are set up by their admins",
}
_ACCESS = {
    "local": "ignored on the local backend (its nodes are this machine)",
    "ssh": "ignored on the ssh backend (nodes are reached with the key file of the workspace's profile)",
    "azure": "ignored on the azure backend (it makes the cluster's SSH key itself; no password is used)",
    "slurm": "ignored on the slurm backend (jobs run as the Slurm user)",
}


def _count(r: _Reader, value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _invalid(path, value, "an integer >= 0")
    return value


def _scale(r: _Reader, value: Any, path: str, notes: list[str]) -> dict[str, Any]:
    scale = r.obj(value, path, ("manual", "autoScale"))
    if len(scale) != 1:
        expected = "exactly one of manual and autoScale"
        if scale:
            raise _error(path, None, expected, f"{path} has both manual and autoScale; expected {expected}")
        _missing(f"{path}.manual", expected)
    if "manual" in scale:
        mpath = f"{path}.manual"
        manual = r.obj(scale["manual"], mpath, ("targetNodeCount", "nodeDeallocationOption"))
        if "targetNodeCount" not in manual:
            _missing(f"{mpath}.targetNodeCount", "the number of nodes")
        if "nodeDeallocationOption" in manual:
            option = r.string(manual["nodeDeallocationOption"], f"{mpath}.nodeDeallocationOption")
            if option.lower() not in _DEALLOCATION:
                _invalid(
                    f"{mpath}.nodeDeallocationOption", option, "requeue, terminate or waitforjobcompletion"
                )
            if option.lower() != "waitforjobcompletion":
                notes.append(
                    f"nodeDeallocationOption {option}: a resize here never takes nodes from a running job "
                    "(it waits for the job, as waitforjobcompletion)"
                )
        return {"nodes": _count(r, manual["targetNodeCount"], f"{mpath}.targetNodeCount")}
    apath = f"{path}.autoScale"
    auto = r.obj(scale["autoScale"], apath, ("minimumNodeCount", "maximumNodeCount", "initialNodeCount"))
    for key in ("minimumNodeCount", "maximumNodeCount"):
        if key not in auto:
            _missing(f"{apath}.{key}", "an integer >= 0")
    out = {
        "min_nodes": _count(r, auto["minimumNodeCount"], f"{apath}.minimumNodeCount"),
        "max_nodes": _count(r, auto["maximumNodeCount"], f"{apath}.maximumNodeCount"),
    }
    if out["max_nodes"] < max(1, out["min_nodes"]):
        _invalid(f"{apath}.maximumNodeCount", out["max_nodes"], "an integer >= 1 and >= minimumNodeCount")
    if "initialNodeCount" in auto:
        initial = _count(r, auto["initialNodeCount"], f"{apath}.initialNodeCount")
        if not out["min_nodes"] <= initial <= out["max_nodes"]:
            _invalid(
                f"{apath}.initialNodeCount", initial, "a count between minimumNodeCount and maximumNodeCount"
            )
        out["initial_nodes"] = initial
    return out


def _image(r: _Reader, value: Any, path: str) -> str:
    config = r.obj(value, path, ("imageReference",))
    ipath = f"{path}.imageReference"
    if "imageReference" not in config:
        _missing(ipath, "an object with publisher, offer, sku (and version)")
    ref = r.obj(
        config["imageReference"], ipath, ("publisher", "offer", "sku", "version", "virtualMachineImageId")
    )
    if "virtualMachineImageId" in ref:
        image_id = r.string(ref["virtualMachineImageId"], f"{ipath}.virtualMachineImageId")
        if not image_id.startswith("/subscriptions/"):
            _invalid(f"{ipath}.virtualMachineImageId", image_id, "an image resource id (/subscriptions/...)")
        return image_id
    parts = []
    for key in ("publisher", "offer", "sku"):
        if key not in ref:
            _missing(f"{ipath}.{key}", "the image's " + key)
        text = r.string(ref[key], f"{ipath}.{key}")
        if ":" in text or any(c.isspace() for c in text):
            _invalid(f"{ipath}.{key}", text, "a name without ':' or spaces")
        parts.append(text)
    version = r.string(ref["version"], f"{ipath}.version") if "version" in ref else "latest"
    return ":".join([*parts, version])


def _node_setup(r: _Reader, value: Any, path: str, notes: list[str]) -> dict[str, Any]:
    setup = r.obj(value, path, ("setupTask", "mountVolumes"), ignored=("performanceCountersSettings",))
    out: dict[str, Any] = {}
    if "setupTask" in setup:
        out.update(_setup_task(r, setup["setupTask"], f"{path}.setupTask", notes))
    if "mountVolumes" in setup:
        out["mounts"] = parse_mount_volumes(r, setup["mountVolumes"], f"{path}.mountVolumes")
    return out


def _setup_task(r: _Reader, value: Any, path: str, notes: list[str]) -> dict[str, Any]:
    """``node_setup`` (the command under bash, its variables exported) and ``node_setup_secrets``."""
    known = ("commandLine", "environmentVariables", "secrets", "stdOutErrPathPrefix", "runElevated")
    task = r.obj(value, path, known, ignored=("stdOutErrPathSuffix",))
    out: dict[str, Any] = {}
    if "commandLine" not in task:
        _missing(f"{path}.commandLine", "the command line run on each node when it is set up")
    command = r.string(task["commandLine"], f"{path}.commandLine")
    exports: list[str] = []
    seen: set[str] = set()
    if "environmentVariables" in task:
        epath = f"{path}.environmentVariables"
        for i, raw in enumerate(r.array(task["environmentVariables"], epath)):
            ipath = f"{epath}[{i}]"
            item = r.obj(raw, ipath, ("name", "value"))
            name = _variable_name(r, item, ipath, seen)
            text = r.string(item.get("value", ""), f"{ipath}.value", nonempty=False)
            exports.append(f"{name}={shlex.quote(text)}")
    if "secrets" in task:
        out["node_setup_secrets"] = _secrets(r, task["secrets"], f"{path}.secrets", seen)
    if "stdOutErrPathPrefix" in task:
        r.string(task["stdOutErrPathPrefix"], f"{path}.stdOutErrPathPrefix")
        notes.append(
            "setupTask.stdOutErrPathPrefix: the setup logs are kept in the cluster's folder "
            "(stdout-setup-<node>.txt, stderr-setup-<node>.txt)"
        )
    if "runElevated" in task and not isinstance(task["runElevated"], bool):
        _invalid(f"{path}.runElevated", task["runElevated"], "true or false")
    prefix = f"export {' '.join(exports)}; " if exports else ""
    out["node_setup"] = f"{prefix}exec bash -c {shlex.quote(command)}"
    return out


def _variable_name(r: _Reader, item: Mapping[str, Any], path: str, seen: set[str]) -> str:
    if "name" not in item:
        _missing(f"{path}.name", "the variable's name")
    name = r.string(item["name"], f"{path}.name")
    if not ENV_NAME_RE.fullmatch(name) or name in seen:
        _invalid(f"{path}.name", name, "a variable name (letters, digits, '_') not used before")
    seen.add(name)
    return name


def _secrets(r: _Reader, value: Any, path: str, seen: set[str]) -> dict[str, str]:
    """``secrets[]``: name → value. A KeyVault reference (``valueSecretReference``) is refused: reading
    it needs the vault's data plane, which this SDK does not call (docs/cluster-json.md)."""
    out: dict[str, str] = {}
    for i, raw in enumerate(r.array(value, path)):
        ipath = f"{path}[{i}]"
        item = r.obj(raw, ipath, ("name", "value", "valueSecretReference"))
        name = _variable_name(r, item, ipath, seen)
        if "valueSecretReference" in item:
            where = f"{ipath}.valueSecretReference"
            raise _error(
                where,
                None,
                "a value",
                f"{where} (a KeyVault secret) cannot be read here: batchai does not call KeyVault; give the "
                f'secret\'s value instead ("value": read it with az keyvault secret show --id <secretUrl> '
                "--query value) — it is kept only in the backend's secrets place, never in a record",
            )
        if "value" not in item:
            _missing(f"{ipath}.value", "the secret's value")
        out[name] = r.string(item["value"], f"{ipath}.value", nonempty=False, secret=True)
    return out


def _user_account(r: _Reader, value: Any, path: str) -> None:
    account = r.obj(value, path, ("adminUserName", "adminUserSshPublicKey", "adminUserPassword"))
    if "adminUserName" not in account:
        _missing(f"{path}.adminUserName", "the administrator's user name")
    r.string(account["adminUserName"], f"{path}.adminUserName")
    if "adminUserSshPublicKey" in account:
        r.string(account["adminUserSshPublicKey"], f"{path}.adminUserSshPublicKey")
    if "adminUserPassword" in account:
        r.string(account["adminUserPassword"], f"{path}.adminUserPassword", secret=True)


def _subnet(r: _Reader, value: Any, path: str) -> str:
    ref = r.obj(value, path, ("id",))
    if "id" not in ref:
        _missing(_join(path, "id"), "the subnet's resource id")
    subnet = r.string(ref["id"], _join(path, "id"))
    if not _SUBNET_RE.fullmatch(subnet):
        _invalid(
            _join(path, "id"),
            subnet,
            "a subnet id: /subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.Network/"
            "virtualNetworks/<vnet>/subnets/<subnet>",
        )
    return subnet
