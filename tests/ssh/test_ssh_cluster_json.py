"""A cluster.json on two sshd nodes: its setup task runs on each node under bash with its variables, as Batch
AI ran it, and flags given with the call override the file."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk import BackendError, BatchAIJsonError, Job, JobState
from batchai_sdk.batchai_json import parse_cluster_json
from test_secrets import files_holding

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]
DOCS = Path(__file__).parent.parent / "data" / "cluster_json"

CLUSTER = {
    "properties": {
        "vmSize": "STANDARD_NC6",
        "scaleSettings": {"manual": {"targetNodeCount": 4}},
        "nodeSetup": {
            "setupTask": {
                "commandLine": 'source /etc/os-release && [[ -n "$ID" ]] && echo "set up: $GREETING on $ID"',
                "environmentVariables": [{"name": "GREETING", "value": "it's Batch AI's"}],
                "stdOutErrPathPrefix": "$AZ_BATCHAI_MOUNT_ROOT/afs",
            }
        },
    }
}


def test_the_setup_task_runs_on_every_node_under_bash(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    ws = ssh_nodes.workspace("clusterjson", tmp_path, NODE_ADDRESSES[:2], env={"PATH": path})
    try:
        notes: list[str] = []
        cluster = ws.create_cluster_from_batchai_json("c", CLUSTER, nodes=2, on_note=notes.append)
        assert cluster.spec.nodes == 2 and cluster.spec.vm_size == "STANDARD_NC6"  # the call wins
        assert any("setup logs" in n for n in notes)
        exp = ws.create_experiment("e")
        doc = {"properties": {"nodeCount": 2, "customToolkitSettings": {"commandLine": "true"}}}
        job = Job.from_batchai_json(doc, experiment=exp, cluster=cluster, name="after-setup")
        job.submit()  # the nodes are set up before the job's first run
        assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
        setup = Path(ws.share.root) / ".batchai" / "clusters" / "c" / "setup"  # type: ignore[attr-defined]
        for address in NODE_ADDRESSES[:2]:
            out = (setup / f"stdout-setup-{address}.txt").read_text()
            assert "set up: it's Batch AI's on " in out, out
    finally:
        ws.close()


def _argv_holding(values: list[bytes]) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if any(v in argv for v in values):
                found.append(argv.decode(errors="replace"))
    return found


def test_the_documentation_s_setup_secrets_reach_the_setup_task_and_nothing_else(
    ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    doc = json.loads((DOCS / "setup_task_variables_and_secrets.json").read_text())
    with pytest.raises(BatchAIJsonError) as info:  # its KeyVault reference cannot be read here
        parse_cluster_json(doc)
    assert info.value.field == "properties.nodeSetup.setupTask.secrets[1].valueSecretReference"
    values = [f"s3cr3t-{uuid.uuid4().hex}", f"it's $(not run) {uuid.uuid4().hex}"]
    secrets = doc["properties"]["nodeSetup"]["setupTask"]["secrets"]
    secrets[0]["value"] = values[0]
    secrets[1] = {"name": "VARIABLE4", "value": values[1]}  # the one change: the value itself
    gate = tmp_path / "gate"
    gate.mkdir()
    script = tmp_path / "mnt" / "afs" / "setup_script.sh"  # $AZ_BATCHAI_MOUNT_ROOT/afs, as the doc has it
    script.parent.mkdir(parents=True)
    script.write_text(
        "#!/bin/bash\n"
        'echo "VARIABLE1=$VARIABLE1"\n'
        'printf %s "$VARIABLE3" | sha256sum; printf %s "$VARIABLE4" | sha256sum\n'
        f"touch {gate}/ready-$$\n"
        f"while [ ! -e {gate}/go ]; do sleep 0.05; done\n"
    )
    script.chmod(0o755)
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    ws = ssh_nodes.workspace("setupsecrets", tmp_path, NODE_ADDRESSES[:2], env={"PATH": path})
    try:
        cluster = ws.create_cluster_from_batchai_json("c", doc, nodes=2)
        exp = ws.create_experiment("e")
        job = exp.create_job("j", cluster=cluster, node_count=2, command_line="true", toolkit="custom")
        submit = threading.Thread(target=job.submit)
        submit.start()  # node setup runs in submit: the setup tasks wait at the gate meanwhile
        deadline = time.monotonic() + 60
        while len(list(gate.glob("ready-*"))) < 2:
            assert submit.is_alive() and time.monotonic() < deadline, job.status.failure_reason
            time.sleep(0.05)
        assert _argv_holding([v.encode() for v in values]) == []  # no process of any node has it
        (gate / "go").touch()
        submit.join(timeout=60)
        assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
        setup = tmp_path / "mnt" / "share" / ".batchai" / "clusters" / "c" / "setup"
        digests = [hashlib.sha256(v.encode()).hexdigest() for v in values]
        for address in NODE_ADDRESSES[:2]:
            out = (setup / f"stdout-setup-{address}.txt").read_text()
            assert "VARIABLE1=Value 1" in out and all(d in out for d in digests), out
        # kept only in the secrets place: the client's file and the cluster's folder on each node, 0600
        holding = sorted(os.path.relpath(p, tmp_path) for p in files_holding(tmp_path, values[0].encode()))
        assert holding == [
            "client_state/clusters/c/setup-secrets.json",
            "node_state/clusters/c/setup-secrets.env",  # the nodes share this machine's folder
        ]
        assert all((tmp_path / p).stat().st_mode & 0o777 == 0o600 for p in holding)
        shown = [repr(cluster), repr(cluster.spec), str(cluster.to_dict()), repr(ws.get_cluster("c").spec)]
        assert [s for s in shown if any(v in s for v in values)] == []
        assert ws.get_cluster("c").spec.node_setup_secret_names == ("VARIABLE3", "VARIABLE4")
        # another client (its own state folder) takes them back from the head node, as it does the key
        other = ssh_nodes.workspace(
            "setupsecrets", tmp_path, NODE_ADDRESSES[:2], state_dir=tmp_path / "client2"
        )
        try:
            spec = other.get_cluster("c").spec
            assert other.backend.setup_secrets(spec) == {"VARIABLE3": values[0], "VARIABLE4": values[1]}  # type: ignore[attr-defined]
        finally:
            other.close()
        ws.delete_cluster("c")  # the nodes' folder and this client's copy go; the other client's stays
        assert [os.path.relpath(p, tmp_path) for p in files_holding(tmp_path, values[1].encode())] == [
            "client2/clusters/c/setup-secrets.json"
        ]
    finally:
        (gate / "go").touch()
        ws.close()


def test_a_cluster_whose_setup_secrets_are_nowhere_is_refused_naming_them(
    ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    ws = ssh_nodes.workspace("lostsecrets", tmp_path, NODE_ADDRESSES[:1])
    other = ssh_nodes.workspace("lostsecrets", tmp_path, NODE_ADDRESSES[:1], state_dir=tmp_path / "c2")
    try:
        ws.create_cluster("c", nodes=1, node_setup="true", node_setup_secrets={"TOKEN": "never-shown"})
        exp = other.create_experiment("e")  # another client: the values are on neither it nor a node
        job = exp.create_job("j", cluster="c", command_line="true", toolkit="custom")
        with pytest.raises(BackendError) as info:
            job.submit()
        assert "node_setup_secrets TOKEN of cluster 'c'" in str(info.value)
        assert "never-shown" not in str(info.value)
        setup = tmp_path / "mnt" / "share" / ".batchai" / "clusters" / "c" / "setup"
        assert not setup.exists() or not list(setup.glob("*.json"))  # no setup record left "running"
    finally:
        other.close()
        ws.close()
