"""``batchai resource list``: every Azure resource batchai_sdk tagged in a subscription — what may still cost.

Formerly ``batchai sweep``, which still works with a deprecation note (``batchai sweep`` is the hyperparameter
sweep group now; ``cli/sweep.py``)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ._context import Context, Result, UsageError
from ._format import Row, _items
from ._params import Commands


def register(commands: Commands) -> None:
    r = commands.group(
        "resource",
        "Azure resources batchai_sdk created (tagged), across resource groups and regions",
        examples=("batchai resource list --subscription 00000000-0000-0000-0000-000000000000 -o table",),
    )
    p = r.command(
        "list",
        resource_list,
        "list every Azure resource batchai_sdk tagged in the subscription (all groups and regions)",
    )
    p.add_argument(
        "--subscription",
        "-s",
        help="subscription id (default: the profile's azure subscription, else AZURE_SUBSCRIPTION_ID)",
    )
    p.add_argument("--workspace", "-w", dest="workspace", help="only this workspace's resources")


def resource_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    from ..backends.azure.sweep import sweep as list_tagged

    subscription = (
        args.subscription
        or ctx.profile.options("azure").get("subscription_id")
        or os.environ.get("AZURE_SUBSCRIPTION_ID")
    )
    if not subscription:
        raise UsageError(
            "--subscription is required (or batchai configure --subscription ID, or AZURE_SUBSCRIPTION_ID)"
        )
    found = list_tagged(str(subscription), workspace=args.workspace)
    return Result([r.to_dict() for r in found], resource_table)


def resource_table(result: Any) -> list[Row]:
    """The columns of ``batchai cluster list``'s kind: one row per resource, scale sets with their VMs."""
    return [
        {
            "Resource Group": r.get("resource_group"),
            "Type": str(r.get("type") or "").rsplit("/", 1)[-1],
            "Name": r.get("name"),
            "Location": r.get("location"),
            "Workspace": r.get("workspace"),
            "VM Size": r.get("vm_size"),
            "Nodes": r.get("nodes"),
            "Created": (r.get("created") or "")[:19].replace("T", " ") or None,
        }
        for r in _items(result)
    ]
