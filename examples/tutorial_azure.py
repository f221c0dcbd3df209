"""The Batch AI tutorial ("Train a distributed model with Horovod") on Azure, with batchai_sdk.

It creates (or reuses) a resource group with a storage account and a file share, a GPU cluster (a VM
scale set), uploads the training script, runs it with Horovod over MPI on every node, streams its output,
downloads the trained model into the current directory and scales the cluster to zero. It costs money:
GPU VMs are billed from the moment they are provisioned until the cluster is resized to 0.

Settings come from environment variables (only the subscription is required):

    AZURE_SUBSCRIPTION_ID     the subscription to bill
    BATCHAI_RESOURCE_GROUP    resource group (default batchai.horovod, as in the tutorial)
    BATCHAI_LOCATION          region (default eastus)
    BATCHAI_WORKSPACE         workspace name (default batchaidev)
    BATCHAI_STORAGE_ACCOUNT   storage account name (default: one the backend derives from the workspace)
    BATCHAI_VM_SIZE           GPU VM size (default Standard_NC4as_T4_v3; the tutorial's NC6 is retired)
    BATCHAI_VM_PRIORITY       dedicated (default) or lowpriority
    BATCHAI_NODES             nodes of the cluster and of the job (default 4, as in the tutorial)
    BATCHAI_EPOCHS            passes over CIFAR-10 by all ranks together (default 100, the tutorial's budget)
    BATCHAI_DELETE_WORKSPACE  1 to delete the resource group at the end (az group delete)

Credentials come from azure-identity's DefaultAzureCredential: `az login`, a service principal in
AZURE_CLIENT_ID / AZURE_TENANT_ID / AZURE_CLIENT_SECRET, or a managed identity. You need the `azure` extra
(`pip install 'batchai_sdk[azure]'`) and GPU quota for the VM size in the region (see docs/azure.md).

    AZURE_SUBSCRIPTION_ID=... python examples/tutorial_azure.py
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from batchai_sdk import BatchAIError, ValidationError, Workspace
from batchai_sdk.train import module_path

MODEL = "cifar/saved_models/keras_cifar10_trained_model.h5"


@dataclass(frozen=True)
class Settings:
    subscription_id: str
    resource_group: str = "batchai.horovod"
    location: str = "eastus"
    workspace: str = "batchaidev"
    storage_account: str | None = None
    vm_size: str = "Standard_NC4as_T4_v3"
    vm_priority: str = "dedicated"
    nodes: int = 4
    epochs: int = 100
    delete_workspace: bool = False


def settings_from_env(env: Mapping[str, str]) -> Settings:
    """Read the settings; a missing subscription or a malformed number raises ValidationError."""
    subscription = env.get("AZURE_SUBSCRIPTION_ID", "").strip()
    if not subscription:
        raise ValidationError("AZURE_SUBSCRIPTION_ID", subscription, "your Azure subscription id (a GUID)")

    def number(name: str, default: int) -> int:
        raw = env.get(name, "").strip()
        if not raw:
            return default
        if not raw.isdigit() or int(raw) < 1:
            raise ValidationError(name, raw, "a whole number >= 1")
        return int(raw)

    return Settings(
        subscription_id=subscription,
        resource_group=env.get("BATCHAI_RESOURCE_GROUP") or Settings.resource_group,
        location=env.get("BATCHAI_LOCATION") or Settings.location,
        workspace=env.get("BATCHAI_WORKSPACE") or Settings.workspace,
        storage_account=env.get("BATCHAI_STORAGE_ACCOUNT") or None,
        vm_size=env.get("BATCHAI_VM_SIZE") or Settings.vm_size,
        vm_priority=env.get("BATCHAI_VM_PRIORITY") or Settings.vm_priority,
        nodes=number("BATCHAI_NODES", Settings.nodes),
        epochs=number("BATCHAI_EPOCHS", Settings.epochs),
        delete_workspace=env.get("BATCHAI_DELETE_WORKSPACE", "") == "1",
    )


def run(settings: Settings) -> int:
    options = {"storage_account": settings.storage_account} if settings.storage_account else {}
    # az group create + az batchai workspace create + az storage account/share create
    ws = Workspace.azure(
        settings.workspace,
        subscription_id=settings.subscription_id,
        resource_group=settings.resource_group,
        location=settings.location,
        **options,
    )
    with ws:
        # az batchai experiment create
        exp = ws.create_experiment("cifar", exist_ok=True)

        # az batchai cluster create --vm-size ... --target N --vm-priority dedicated --generate-ssh-keys
        cluster = ws.create_cluster(
            "nc6cluster",
            vm_size=settings.vm_size,
            nodes=settings.nodes,
            vm_priority=settings.vm_priority,
            exist_ok=True,
        )
        if cluster.target_nodes != settings.nodes:
            cluster.resize(settings.nodes)  # an earlier run scaled it to zero
        print(f"waiting for {settings.nodes} x {settings.vm_size} in {settings.location} ...")
        cluster.wait_until_steady(timeout=3600, poll_interval=15)
        print(cluster.state, cluster.node_counts)  # az batchai cluster show --output table

        state = None
        try:
            # az storage directory create + az storage file upload
            ws.share.mkdir("cifar")
            ws.share.upload(module_path("cifar10"), "cifar/cifar_cnn_distributed.py")

            # az batchai job create --config-file job.json: the same properties as keyword arguments
            job = exp.create_job(
                f"cifar_distributed_{time.strftime('%Y%m%d_%H%M%S')}",
                cluster=cluster,
                node_count=settings.nodes,
                python_script="$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar/cifar_cnn_distributed.py",
                args=["--dir", "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar", "--epochs", str(settings.epochs)],
                std_out_err_path_prefix="$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar",
            )
            job.submit()
            print(f"submitted {exp.name}/{job.name}; it goes on if this script stops")

            # az batchai job file stream --file-name stdout.txt
            for line in job.stream("stdout.txt", poll_interval=5):
                print(line)
            state = job.wait(poll_interval=5)
            print(f"job {state}, exit code {job.exit_code}", job.status.failure_reason or "")

            # az batchai job file list --output table
            for f in job.files():
                print(f"{f.name:60} {f.type:9} {f.size or 0:>10} {f.modified}")

            if state == "succeeded":
                # az storage file download
                model = ws.share.download(MODEL, Path.cwd())
                print(f"model downloaded to {model}")
        finally:
            # az batchai cluster resize --target 0: idle GPU nodes are billed
            cluster.resize(0)
            print("cluster scaled to 0 nodes")

        if settings.delete_workspace:
            ws.delete(force=True)  # az group delete
            print(f"deleted resource group {settings.resource_group}")
    return 0 if state == "succeeded" else 1


def main() -> int:
    try:
        return run(settings_from_env(os.environ))
    except BatchAIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
