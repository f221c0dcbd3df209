"""cluster.json as ``az batchai cluster create -f`` took it: Batch AI's documentation examples, every field
mapped onto the cluster (or passed over / refused with the JSON path), flags overriding the file, the setup
task run under bash with its variables, and the CLI and Python twins."""

from __future__ import annotations

import copy
import json
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk import BatchAIJsonError, BatchAIJsonWarning, Workspace
from batchai_sdk._models import ClusterSpec
from batchai_sdk.backends.azure import provision as prov
from batchai_sdk.batchai_json import parse_cluster_json
from batchai_sdk.cli import main

DOCS = Path(__file__).parent / "data" / "cluster_json"
SUBNET = "/subscriptions/0000/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v/subnets/s"
FULL: dict[str, Any] = {
    "$schema": "https://raw.githubusercontent.com/Azure/BatchAI/master/schemas/2018-05-01/cluster.json",
    "properties": {
        "vmSize": "STANDARD_NC6",
        "vmPriority": "lowpriority",
        "scaleSettings": {"manual": {"targetNodeCount": 2, "nodeDeallocationOption": "requeue"}},
        "virtualMachineConfiguration": {
            "imageReference": {
                "publisher": "microsoft-dsvm",
                "offer": "linux-data-science-vm-ubuntu",
                "sku": "linuxdsvmubuntu",
            }
        },
        "nodeSetup": {
            "setupTask": {
                "commandLine": "echo ready",
                "environmentVariables": [{"name": "V1", "value": "Value 1"}],
                "stdOutErrPathPrefix": "$AZ_BATCHAI_MOUNT_ROOT/afs",
            },
            "performanceCountersSettings": {
                "appInsightsReference": {"component": {"id": "/subscriptions/x"}}
            },
        },
        "userAccountSettings": {"adminUserName": "demoUser", "adminUserPassword": "pw-never-stored"},
        "subnet": {"id": SUBNET},
    },
}


def doc(path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(FULL)
    node: Any = out
    *parents, last = path.split(".")
    for part in parents:
        node = node[part]
    node[last] = value
    return out


def test_every_field_maps_onto_the_cluster() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parsed = parse_cluster_json(FULL, backend="azure")
    args = parsed.create_args
    assert args["vm_size"] == "STANDARD_NC6"
    assert args["vm_priority"] == "lowpriority"
    assert args["nodes"] == 2
    assert args["image"] == "microsoft-dsvm:linux-data-science-vm-ubuntu:linuxdsvmubuntu:latest"
    assert args["subnet"] == SUBNET
    assert "pw-never-stored" not in repr(parsed)
    [warning] = [str(w.message) for w in caught if issubclass(w.category, BatchAIJsonWarning)]
    assert "properties.nodeSetup.performanceCountersSettings" in warning
    assert any("nodeDeallocationOption requeue" in n for n in parsed.notes)
    assert any("setup logs" in n for n in parsed.notes)


def test_auto_scale_and_an_image_id() -> None:
    image_id = "/subscriptions/0/resourceGroups/g/providers/Microsoft.Compute/images/dsvm"
    parsed = parse_cluster_json(
        doc("properties.scaleSettings",
            {"autoScale": {"minimumNodeCount": 0, "maximumNodeCount": 4, "initialNodeCount": 1}})
        | {},
        backend="local",
    )  # fmt: skip
    assert {k: parsed.create_args[k] for k in ("min_nodes", "max_nodes", "initial_nodes")} == {
        "min_nodes": 0,
        "max_nodes": 4,
        "initial_nodes": 1,
    }
    assert "nodes" not in parsed.create_args
    parsed = parse_cluster_json(
        doc("properties.virtualMachineConfiguration.imageReference", {"publisher": "p", "offer": "o",
            "sku": "s", "virtualMachineImageId": image_id}), backend="azure",
    )  # fmt: skip
    assert parsed.create_args["image"] == image_id


@pytest.mark.parametrize(
    ("path", "value", "where", "words"),
    [
        ("properties.vmPriority", "spot", "properties.vmPriority", ["'dedicated' or 'lowpriority'"]),
        ("properties.scaleSettings", {}, "properties.scaleSettings.manual", ["exactly one of"]),
        (
            "properties.scaleSettings",
            {"autoScale": {"minimumNodeCount": 3, "maximumNodeCount": 2}},
            "properties.scaleSettings.autoScale.maximumNodeCount",
            [">= minimumNodeCount"],
        ),
        ("properties.subnet", {"id": "/subs/x"}, "properties.subnet.id", ["a subnet id"]),
        ("properties.nodeSetup.setupTask", {}, "properties.nodeSetup.setupTask.commandLine", ["missing"]),
        (
            "properties.nodeSetup.setupTask.environmentVariables",
            [{"name": "1X", "value": "v"}],
            "properties.nodeSetup.setupTask.environmentVariables[0].name",
            ["variable name"],
        ),
        ("properties.vmSise", "x", "properties.vmSise", ["unknown field", "did you mean 'vmSize'"]),
        (
            "properties.userAccountSettings",
            {"adminUserPassword": "pw"},
            "properties.userAccountSettings.adminUserName",
            ["missing"],
        ),
    ],
)
def test_each_mistake_names_its_json_path(path: str, value: Any, where: str, words: list[str]) -> None:
    with pytest.raises(BatchAIJsonError) as info:
        parse_cluster_json(doc(path, value))
    assert info.value.field == where
    for word in words:
        assert word in str(info.value)


def test_the_setup_task_runs_under_bash_with_its_variables(tmp_path: Path) -> None:
    task = {
        "commandLine": 'source "$HOME/env.sh" && [[ $V1 == "Value 1" ]] && echo "$V1|$V2|$FROM_FILE"',
        "environmentVariables": [{"name": "V1", "value": "Value 1"}, {"name": "V2", "value": "it's $x"}],
        "stdOutErrPathPrefix": "$AZ_BATCHAI_MOUNT_ROOT/afs",
    }
    (tmp_path / "env.sh").write_text("FROM_FILE=sourced\n")
    command = parse_cluster_json(doc("properties.nodeSetup.setupTask", task)).create_args["node_setup"]
    # the SSH backend runs node_setup with /bin/sh -c, as it runs any --setup-task
    out = subprocess.run(
        ["/bin/sh", "-c", command], env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout == "Value 1|it's $x|sourced\n"


def test_the_documentation_s_setup_task_example_refuses_only_its_keyvault_reference() -> None:
    path = DOCS / "setup_task_variables_and_secrets.json"
    with pytest.raises(BatchAIJsonError) as info:
        parse_cluster_json(path)
    assert info.value.field == "properties.nodeSetup.setupTask.secrets[1].valueSecretReference"
    assert "KeyVault" in str(info.value) and "az keyvault secret show" in str(info.value)
    doc = json.loads(path.read_text())
    doc["properties"]["nodeSetup"]["setupTask"]["secrets"][1] = {"name": "VARIABLE4", "value": "v4"}
    args = parse_cluster_json(doc, backend="ssh").create_args
    assert args["node_setup"].startswith("export VARIABLE1='Value 1' VARIABLE2='Value 2'; exec bash -c ")
    assert args["node_setup_secrets"] == {"VARIABLE3": "Value 3", "VARIABLE4": "v4"}
    assert "Value 3" not in args["node_setup"]  # never on the command line
    for backend in ("local", "slurm"):  # a setup task is not run there: its secrets are not kept
        parsed = parse_cluster_json(doc, backend=backend)
        assert "node_setup_secrets" not in parsed.create_args
        assert f"setupTask: not run on the {backend} backend" in " ".join(parsed.notes)
    for secrets, where in (
        ([{"name": "VARIABLE1", "value": "x"}], "secrets[0].name"),  # a name used by a variable
        ([{"name": "S"}], "secrets[0].value"),
        ([{"name": "S", "value": 5}], "secrets[0].value"),
    ):
        doc["properties"]["nodeSetup"]["setupTask"]["secrets"] = secrets
        with pytest.raises(BatchAIJsonError) as info:
            parse_cluster_json(doc)
        assert info.value.field == f"properties.nodeSetup.setupTask.{where}"


def test_the_documentation_s_mount_examples_give_the_cluster_its_mounts() -> None:
    parsed = parse_cluster_json(DOCS / "unmanaged_file_system_and_subnet.json", backend="azure")
    [mount] = parsed.create_args["mounts"]
    assert mount.relative_mount_path == "glusterfs"
    assert parsed.create_args["subnet"].endswith("/subnets/my-server-subnet")
    on_local = parse_cluster_json(DOCS / "unmanaged_file_system_and_subnet.json", backend="local")
    assert "subnet" not in on_local.create_args
    assert any("subnet: ignored on the local backend" in n for n in on_local.notes)

    many = json.loads((DOCS / "mount_multiple_file_systems.json").read_text())
    volumes = many["properties"]["nodeSetup"]["mountVolumes"]
    for i, server in enumerate(volumes["fileServers"]):  # the example's ids are placeholders
        server["fileServer"]["id"] = (
            f"/subscriptions/0/resourceGroups/g/providers/Microsoft.BatchAI/workspaces/w/fileServers/nfs{i}"
        )
    parsed = parse_cluster_json(many, storage_account="acct", storage_key="a2V5")
    assert sorted(m.relative_mount_path for m in parsed.create_args["mounts"]) == [
        "afs1", "afs2", "bfs1", "bfs2", "glusterfs", "nfs1", "nfs2",
    ]  # fmt: skip


def test_python_twin_creates_the_cluster_and_calls_win_over_the_file(tmp_path: Path) -> None:
    ws = Workspace.local(root=tmp_path / "ws")
    local = doc("properties.userAccountSettings", {"adminUserName": "u"})
    del local["properties"]["subnet"]
    cluster = ws.create_cluster_from_batchai_json("fromfile", local, vm_size="Standard_D2s_v3")
    spec: ClusterSpec = cluster.spec
    assert (spec.vm_size, spec.nodes, spec.vm_priority.value) == ("Standard_D2s_v3", 2, "lowpriority")
    assert spec.node_setup is not None and spec.node_setup.startswith("export V1='Value 1'; ")
    assert ws.get_cluster("fromfile").spec.image == spec.image  # recorded


def test_cli_cluster_create_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    g = ["-g", "rg", "-w", "ws"]
    assert main(["group", "create", "--name", "rg", "--location", "eastus"]) == 0
    assert main(["workspace", "create", "--resource-group", "rg", "--workspace", "ws"]) == 0
    path = DOCS / "unmanaged_file_system_and_subnet.json"
    capsys.readouterr()
    code = main(["cluster", "create", *g, "-n", "gluster", "-s", "Standard_NC6", "-t", "1", "-f", str(path),
                 "-o", "json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["name"] == "gluster"
    assert "subnet: ignored on the local backend" in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc("properties.vmPriority", "spot")))
    code = main(["cluster", "create", *g, "-n", "bad", "-f", str(bad)])
    _, err = capsys.readouterr()
    assert code != 0
    assert "properties.vmPriority" in err and "Traceback" not in err


def test_azure_scale_set_goes_into_the_file_s_subnet() -> None:
    names = prov.WorkspaceNames("ws", "0000", "rg", "eastus", "acct", "share")
    for extra, subnet in (({"subnet": SUBNET}, SUBNET), ({}, names.subnet_id)):
        body = prov.scale_set_body(
            names, ClusterSpec("c", "Standard_NC6", 1, extra=extra), image=prov.DEFAULT_IMAGE,
            admin_user="azureuser", public_key="ssh-ed25519 AAAA x", setup_script="true",
        )  # fmt: skip
        profile = body["properties"]["virtualMachineProfile"]["networkProfile"]
        ip = profile["networkInterfaceConfigurations"][0]["properties"]["ipConfigurations"][0]
        assert ip["properties"]["subnet"]["id"] == subnet


def test_file_server_create_from_nfs_json_is_refused_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    nfs = tmp_path / "nfs.json"
    nfs.write_text(json.dumps({"properties": {"vmSize": "Standard_D2_v2", "dataDisks": {"diskCount": 2}}}))
    code = main(["file-server", "create", "-g", "rg", "-w", "ws", "-n", "nfs", "-f", str(nfs)])
    err = capsys.readouterr().err
    assert code == 2
    assert "mountVolumes.fileServers" in err and "docs/cluster-json.md" in err
