"""A blob container mounted for real through FUSE on an SSH node that has rclone and no blobfuse2: Azurite
(Microsoft's storage emulator, from npm) serves the container inside a namespace node (tests/nsnodes.py:
its own network, no default route, so nothing can leave even if it tried; telemetry off as well), the
azure-storage-blob SDK uploads to it from the client, the cluster's node setup mounts it with
``rclone mount`` through a SAS URL made on the client, and a job reads the file at
``$AZ_BATCHAI_MOUNT_ROOT/<path>`` and writes one back that the SDK then downloads."""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

import pytest

from _procs import wait_for
from batchai_sdk import AzureBlobContainer, JobState
from nsnodes import NODE_STATE_DIR, NSNodes

pytestmark = [pytest.mark.ssh, pytest.mark.mpi, pytest.mark.nsnodes]
# Azurite's well-known development account (its documentation publishes it; it is no secret)
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
NPM_PREFIX = Path(os.environ.get("BATCHAI_NPM_PREFIX", "~/.cache/batchai_sdk/npm")).expanduser()


def azurite() -> str | None:
    found = shutil.which("azurite-blob")
    local = NPM_PREFIX / "node_modules" / ".bin" / "azurite-blob"
    return found or (str(local) if local.exists() else None)


def skip_reason() -> str | None:
    if shutil.which("node") is None:
        return "Node.js is not installed (apt-get install nodejs npm)"
    if azurite() is None:
        return f"Azurite is not installed (npm install --prefix {NPM_PREFIX} azurite@3)"
    if shutil.which("rclone") is None or shutil.which("fusermount") is None:
        return "rclone and FUSE are not installed (apt-get install rclone fuse3)"
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse here"
    try:
        import azure.storage.blob  # noqa: F401
    except ImportError:
        return "azure-storage-blob is not installed (the azure extra)"
    return None


def wait_port(address: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_blob_container_is_mounted_by_rclone_and_a_job_reads_and_writes_it(
    ns_nodes: NSNodes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    why = skip_reason()
    if why:
        pytest.skip(why)
    from azure.storage.blob import BlobServiceClient

    server, node = ns_nodes["node1"], ns_nodes["node2"]
    root = tmp_path_factory.mktemp("blobrclone")
    blobs = root / "azurite"
    blobs.mkdir()
    argv = [
        azurite(), "--blobHost", "0.0.0.0", "--blobPort", "10000", "--location", str(blobs),
        "--disableTelemetry", "--skipApiVersionCheck", "--loose", "--silent",
    ]  # fmt: skip
    emulator = server.popen([str(a) for a in argv], stdout=open(root / "azurite.log", "wb"), stderr=-2)  # noqa: SIM115
    endpoint = f"http://{server.address}:10000/{ACCOUNT}"
    mount = AzureBlobContainer("bfs", ACCOUNT, "data", endpoint=endpoint, account_key=KEY)
    ws = ns_nodes.workspace("blobrclone", root, [node.address])
    point = f"{root}/bfs"  # $AZ_BATCHAI_MOUNT_ROOT: the share's parent folder
    try:
        wait_port(server.address, 10000, 60)
        service = BlobServiceClient(endpoint, credential={"account_name": ACCOUNT, "account_key": KEY})
        container = service.create_container("data")
        container.upload_blob("inputs/hello.txt", b"hello from the blob container\n")
        cluster = ws.create_cluster("c", nodes=1, mounts=[mount])
        job = ws.create_experiment("e").create_job(
            "reads", cluster=cluster, toolkit="custom",
            command_line="cat $AZ_BATCHAI_MOUNT_ROOT/bfs/inputs/hello.txt "
            "&& echo written-by-the-job > $AZ_BATCHAI_MOUNT_ROOT/bfs/out.txt",
        )  # fmt: skip
        job.submit()
        assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
        assert job.tail() == ["hello from the blob container"]
        assert "rclone" in node.run(f"grep ' {point} ' /proc/mounts").stdout  # a FUSE mount by rclone
        # the write reaches the container once rclone uploads it (its write-back cache: a few seconds)
        deadline = time.monotonic() + 60
        while not any(b.name == "out.txt" for b in container.list_blobs()):
            assert time.monotonic() < deadline, "the job's file never reached the container"
            time.sleep(0.2)
        assert container.download_blob("out.txt").readall() == b"written-by-the-job\n"
        # the key is kept on the client 0600 (no record holds it), where every later submit finds it
        kept = root / "client_state" / "clusters" / "c" / "mount-keys.json"
        assert kept.stat().st_mode & 0o777 == 0o600 and KEY in kept.read_text()
        # the account key is on no node's disk: rclone's config holds a SAS of this container only
        configs = node.run(f"cat {NODE_STATE_DIR}/mount-secrets/rclone-bfs.conf").stdout
        assert "sas_url = " in configs and KEY not in configs and "sig=" in configs
    finally:
        node.run(f"fusermount -u {point}")
        ws.close()
        server.terminate(emulator)
    # nothing left for the next tests on these nodes: rclone ends with its mount, Azurite was stopped
    wait_for(lambda: not node.leftovers() and not server.leftovers(), timeout=30, what="rclone to end")
