"""The ``batchai`` commands, unchanged, on a workspace whose engine is Azure Batch: the profile holds the
backend's options, the credential is the environment's service principal (its token fetched from the
faked Entra ID endpoints), and Azure, Batch and Files are the fakes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from azure_helpers import ACCOUNT, SUBSCRIPTION, TOKEN
from fake_batch import FakeBatchArm, FakeBatchService
from fake_files import FakeFilesService

from batchai_sdk.cli import main

pytest.importorskip("azure.batch")

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
LOGIN = f"https://login.microsoftonline.com/{TENANT}"
RG = ["--resource-group", "batchai.horovod", "--workspace", "batchdev"]


def entra_id(request: Any) -> tuple[int, dict[str, str], str]:
    """The two calls a client-secret credential makes: OpenID configuration, then the token."""
    if request.url.endswith("/v2.0/.well-known/openid-configuration"):
        body = {
            "token_endpoint": f"{LOGIN}/oauth2/v2.0/token",
            "authorization_endpoint": f"{LOGIN}/oauth2/v2.0/authorize",
            "issuer": f"{LOGIN}/v2.0",
        }
        return 200, {"Content-Type": "application/json"}, json.dumps(body)
    if request.method == "POST" and request.url.endswith("/oauth2/v2.0/token"):
        return (
            200,
            {"Content-Type": "application/json"},
            json.dumps({"token_type": "Bearer", "expires_in": 3600, "access_token": TOKEN}),
        )
    return 404, {}, ""


@pytest.fixture
def azure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBatchService]:
    monkeypatch.setenv("AZURE_TENANT_ID", TENANT)
    monkeypatch.setenv("AZURE_CLIENT_ID", "0d3a7f5e-2b1c-4e8f-9a6d-5c4b3a2f1e0d")
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "client-secret-value")
    home = Path(__import__("os").environ["BATCHAI_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "profile.json").write_text(
        json.dumps(
            {
                "backend": "azure",
                "azure": {
                    "subscription_id": SUBSCRIPTION,
                    "location": "eastus",
                    "storage_account": ACCOUNT,
                    "state_dir": str(tmp_path / "state"),
                    "polling_interval": 0,
                    "retry_total": 2,
                    "retry_backoff_factor": 0,
                    "share_retry_backoff": 0,
                    "install_stack": False,
                },
            }
        )
    )
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        for method in ("GET", "POST"):
            mock.add_callback(method, re.compile(re.escape(LOGIN) + "/.*"), callback=entra_id)
        arm = FakeBatchArm(SUBSCRIPTION)
        service = FakeBatchService(account=_account_of("batchdev"))
        service.register(mock)
        arm.register(mock)
        FakeFilesService(tmp_path / "files", ACCOUNT).register(mock)
        yield service


def _account_of(workspace: str) -> str:
    from batchai_sdk.backends.azure_batch.account import batch_account_name

    return batch_account_name(workspace, SUBSCRIPTION, "batchai.horovod")


def batchai(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == status, f"batchai {' '.join(argv)} -> {code}\n{out}\n{err}"
    return out


def test_cluster_and_job_commands_run_on_the_batch_engine(
    azure: FakeBatchService, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    service = azure
    batchai(capsys, "group", "create", "--name", "batchai.horovod", "--location", "eastus")
    shown = json.loads(batchai(capsys, "workspace", "create", *RG, "--engine", "batch"))
    assert shown["engine"] == "batch" and shown["batch_account"] == service.account
    batchai(capsys, "cluster", "create", *RG, "--name", "nc", "--vm-size", "Standard_NC4as_T4_v3",
            "--target", "2")  # fmt: skip
    assert service.body_of("POST", r"^/pools$")["id"] == "nc"
    assert (
        json.loads(batchai(capsys, "cluster", "show", *RG, "--name", "nc"))["nodeStateCounts"][
            "idleNodeCount"
        ]
        == 2
    )
    batchai(capsys, "experiment", "create", *RG, "--name", "cifar")
    doc = {"properties": {"nodeCount": 2, "customMpiSettings": {"commandLine": "echo hi", "processCount": 2}}}
    (tmp_path / "job.json").write_text(json.dumps(doc))
    job = [*RG, "--experiment", "cifar", "--name", "j1"]
    batchai(capsys, "job", "create", *job, "--cluster", "nc", "--config-file", str(tmp_path / "job.json"))
    (job_id,) = service.job_ids()
    assert service.tasks[job_id]["job"]["multiInstanceSettings"]["numberOfInstances"] == 2
    assert batchai(capsys, "job", "show", *job, "--query", "executionState", "-o", "tsv").strip() == "queued"
    service.set_task(job_id, state="completed", executionInfo={"result": "success", "exitCode": 0})
    assert batchai(
        capsys, "job", "wait", *job, "--query", "[executionState, exitCode]", "-o", "tsv"
    ).split() == ["succeeded", "0"]
    service.files[(job_id, "job", "stdout.txt")] = b"node ready\n"
    files = json.loads(batchai(capsys, "job", "file", "list", *RG, "--experiment", "cifar", "--job", "j1",
                               "--output-directory-id", "batch"))  # fmt: skip
    assert [(f["name"], f["type"], f["size"]) for f in files] == [("stdout.txt", "file", 11)]
    batchai(capsys, "cluster", "resize", *RG, "--name", "nc", "--target", "0")
    assert service.body_of("POST", r"^/pools/nc/resize$")["targetDedicatedNodes"] == 0
