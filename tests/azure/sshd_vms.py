"""An Azure workspace whose scale-set instances are sshd "VMs" on loopback addresses.

ARM is the fake (the real azure-mgmt clients talk to it over HTTP through ``responses``); an instance it
creates is an sshd node that then accepts the keys of the scale set's osProfile, and run-command answers
that sshd's real host key. The share is the fake Files API over the folder the nodes see as their mount.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import responses
from azure_helpers import ACCOUNT, SUBSCRIPTION, FakeCredential
from fake_arm import FakeArm
from fake_files import FakeFilesService

from batchai_sdk import Workspace
from batchai_sdk.backends.azure import AzureInstance, NodeEnvironment

sys.path.insert(0, str(Path(__file__).parents[1] / "ssh"))
from sshd import SSHNodes, sshd_available, start_nodes


def workspace_on_sshd_vms(
    mock: responses.RequestsMock,
    vms: SSHNodes,
    addresses: Sequence[str],
    tmp_path: Path,
    *,
    resolved: list[str] | None = None,
) -> tuple[Workspace, FakeArm, FakeFilesService]:
    """The workspace, the fake ARM and the fake Files service; instance ``i`` is ``addresses[i]``, the
    nodes' mount root is ``tmp_path/mounts``, and ``resolved`` collects the instances SSH resolved."""

    def provision_vm(vmss: dict[str, Any], instance: Any) -> None:
        profile = vmss["properties"]["virtualMachineProfile"]["osProfile"]
        with vms.authorized_keys.open("a") as f:
            for key in profile["linuxConfiguration"]["ssh"]["publicKeys"]:
                f.write(key["keyData"] + "\n")

    def host_key(vmss: str, index: int) -> str:
        return Path(f"{vms.nodes[addresses[index]].host_key}.pub").read_text()

    def resolve(instance: AzureInstance) -> tuple[str, int]:
        if resolved is not None:
            resolved.append(instance.name)
        assert instance.public_ip is not None
        return instance.public_ip, vms.port

    arm = FakeArm(
        SUBSCRIPTION,
        addresses=lambda vmss, i: (addresses[i], addresses[i]),
        host_keys=host_key,
        on_instance_created=provision_vm,
    )
    arm.register(mock)
    files = FakeFilesService(tmp_path / "mounts", ACCOUNT)
    files.register(mock)
    node_env = NodeEnvironment(
        mount_root=str(tmp_path / "mounts"), temp_root=str(tmp_path / "node_tmp"), python=sys.executable,
        mpirun="mpirun", mpi_prefix=None, path=None,
    )  # fmt: skip
    ws = Workspace.azure(
        "batchaidev",
        subscription_id=SUBSCRIPTION,
        resource_group="batchai.horovod",
        location="eastus",
        credential=FakeCredential(),
        storage_account=ACCOUNT,
        ssh_source_cidr="203.0.113.7/32",
        state_dir=tmp_path / "client_state",
        polling_interval=0,
        retry_total=3,
        retry_backoff_factor=0,
        share_retry_backoff=0,
        node_env=node_env,
        ssh_port=vms.port,
        ssh_user=vms.user,
        tcp_interface="lo",
        node_address_resolver=resolve,
        ssh_options={
            "node_state_dir": str(tmp_path / "node_state"),
            "authorized_keys_path": str(vms.authorized_keys),
            "connect_timeout": 5.0,
        },
    )
    return ws, arm, files


def start_vms(folder: Path, addresses: Sequence[str]) -> Iterator[SSHNodes]:
    """sshd "VMs" that accept no key until the fake ARM provisions a scale set onto them (skips where
    mpirun, sshd or root is missing)."""
    if shutil.which("mpirun") is None:
        pytest.skip("needs mpirun")
    if not sshd_available():
        pytest.skip("OpenSSH's sshd is not installed")
    if os.geteuid() != 0:
        pytest.skip("the sshd nodes need root")
    with start_nodes(folder, list(addresses)) as nodes:
        nodes.authorized_keys.write_text("")  # only what a scale set's osProfile brings
        yield nodes
