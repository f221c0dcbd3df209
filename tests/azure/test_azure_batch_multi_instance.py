"""Batch's multi-instance task model emulated on sshd nodes: a Batch AI job.json goes through the Azure
Batch engine (the real azure-batch client adds the job and its task to the fake service), then the task is
run as the Batch node agent runs it — the coordination command on every node, then the application
command on the primary, with ``AZ_BATCH_HOST_LIST``, ``AZ_BATCH_MASTER_NODE``, ``AZ_BATCH_NODE_ID``,
``AZ_BATCH_TASK_WORKING_DIR`` and the task's environment settings — with real mpirun over ssh between the
nodes and real torch DDP. The nodes see the workspace share where the pool's mount would be (the fake
Files API's folder)."""

from __future__ import annotations

import concurrent.futures
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from batch_helpers import batch_workspace
from fake_batch import FakeBatchService

from batchai_sdk import Job, JobState, Workspace
from batchai_sdk import _layout as layout

sys.path.insert(0, str(Path(__file__).parents[1] / "ssh"))
from sshd import SSHNodes, sshd_available, start_nodes

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]
pytest.importorskip("azure.batch")

ADDRESSES = ["127.0.0.2", "127.0.0.3"]

DDP = """
    import os, torch, torch.distributed as dist
    dist.init_process_group(backend=os.environ["AZ_BATCHAI_PYTORCH_BACKEND"],
                            init_method=os.environ["AZ_BATCHAI_PYTORCH_INIT_METHOD"],
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    t = torch.tensor([float(os.environ["RANK"]) + 1])
    dist.all_reduce(t)
    print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} node {os.environ['NODE_RANK']} "
          f"sum {t.item():.0f} restart {os.environ['AZ_BATCHAI_JOB_RESTART_COUNT']} "
          f"token {os.environ.get('HF_TOKEN') == 'tok-s3cret'}", flush=True)
    dist.destroy_process_group()
"""


def ssh_config(nodes: SSHNodes, folder: Path) -> Path:
    """What Batch sets up between a pool's nodes: key-based SSH for the pool user, no host-key prompts."""
    path = folder / "ssh_config"
    path.write_text(
        "Host *\n"
        f"  Port {nodes.port}\n  User {nodes.user}\n  IdentityFile {nodes.key_file}\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n"
    )
    return path


class NodeAgent:
    """Runs a multi-instance task as Batch's node agent does, on sshd nodes (test stand-in for the
    service side only; everything it runs is what our engine sent)."""

    def __init__(self, service: FakeBatchService, config: Path, work: Path) -> None:
        self.service = service
        self.config = config
        self.work = work

    def _run(
        self, job_id: str, index: int, address: str, hosts: list[str], command: str, env: dict[str, str]
    ) -> subprocess.CompletedProcess[bytes]:
        wd = self.work / job_id / f"node{index}" / "wd"
        wd.mkdir(parents=True, exist_ok=True)
        node_env = {
            **env,
            "AZ_BATCH_HOST_LIST": ",".join(hosts),
            "AZ_BATCH_MASTER_NODE": f"{hosts[0]}:6000",
            "AZ_BATCH_IS_CURRENT_NODE_MASTER": "true" if index == 0 else "false",
            "AZ_BATCH_NODE_ID": f"tvm-1695681911_{index + 1}-20161122t193202z",
            "AZ_BATCH_TASK_WORKING_DIR": str(wd),
            "AZ_BATCH_JOB_ID": job_id,
            "AZ_BATCH_TASK_ID": "job",
            "PATH": os.environ["PATH"],
        }
        env_file = wd.parent / "env"  # the settings reach the node in a 0600 file, not an argv
        env_file.touch(mode=0o600)
        env_file.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in node_env.items()))
        remote = f". {shlex.quote(str(env_file))} && cd {shlex.quote(str(wd))} && {command}"
        argv = ["ssh", "-F", str(self.config), address, remote]
        return subprocess.run(argv, capture_output=True, timeout=300, check=False)

    def run(self, job_id: str) -> int:
        task = self.service.tasks[job_id]["job"]
        settings = {e["name"]: e["value"] for e in task.get("environmentSettings") or ()}
        count = task["multiInstanceSettings"]["numberOfInstances"]
        hosts = ADDRESSES[:count]
        self.service.set_task(
            job_id, state="running", nodeInfo={"nodeId": "tvm-1695681911_1-20161122t193202z"}
        )
        coordination = task["multiInstanceSettings"]["coordinationCommandLine"]
        with concurrent.futures.ThreadPoolExecutor(len(hosts)) as pool:
            done = list(
                pool.map(
                    lambda i: self._run(job_id, i, hosts[i], hosts, coordination, settings), range(count)
                )
            )
        failed = [p for p in done if p.returncode != 0]
        if failed:
            self.service.files[(job_id, "job", "stderr.txt")] = failed[0].stderr
            self.service.set_task(
                job_id,
                state="completed",
                executionInfo={
                    "result": "failure",
                    "exitCode": failed[0].returncode,
                    "failureInfo": {
                        "category": "usererror",
                        "code": "FailureExitCode",
                        "message": "The coordination command failed",
                    },
                },
            )
            return failed[0].returncode
        app = self._run(job_id, 0, hosts[0], hosts, task["commandLine"], settings)
        self.service.files[(job_id, "job", "stdout.txt")] = app.stdout
        self.service.files[(job_id, "job", "stderr.txt")] = app.stderr
        retries = int(task["executionInfo"].get("retryCount") or 0)
        if app.returncode != 0 and retries < task["constraints"]["maxTaskRetryCount"]:
            self.service.set_task(job_id, state="active", executionInfo={"retryCount": retries + 1})
            return app.returncode  # the service retries the task: back in the queue, same ids
        result = "success" if app.returncode == 0 else "failure"
        self.service.set_task(
            job_id, state="completed", executionInfo={"result": result, "exitCode": app.returncode}
        )
        return app.returncode


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, FakeBatchService, NodeAgent]]:
    if shutil.which("mpirun") is None:
        pytest.skip("needs mpirun")
    if not sshd_available() or os.geteuid() != 0:
        pytest.skip("needs OpenSSH's sshd, as root")
    root = tmp_path_factory.mktemp("batch-mi")
    with (
        responses.RequestsMock(assert_all_requests_are_fired=False) as mock,
        start_nodes(root / "sshd", ADDRESSES) as nodes,
    ):
        config = ssh_config(nodes, root)
        ws, _arm, service, _files = batch_workspace(
            mock,
            root,
            node_mounts_dir=str(root / "mounts"),
            node_temp_root=str(root / "node_tmp"),
            node_python=sys.executable,
            node_mpirun="mpirun",
            node_ssh_command=("ssh", "-F", str(config)),
            node_mpi_args=("--mca", "plm_rsh_agent", f"ssh -F {config}", "--mca", "btl", "self,tcp",
                           "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"),
            node_env_vars={"PATH": os.environ["PATH"]},
        )  # fmt: skip
        ws.create_cluster("pool2", vm_size="Standard_D2s_v5", nodes=2, idle_seconds_before_scaledown=None)
        yield ws, service, NodeAgent(service, config, root / "agent")
        ws.close()


def _only_job(service: FakeBatchService, before: set[str]) -> str:
    (job_id,) = set(service.job_ids()) - before
    return job_id


def test_a_pytorch_job_json_runs_as_a_multi_instance_task_with_mpirun_and_ddp(lab: Any) -> None:
    pytest.importorskip("torch")
    ws, service, agent = lab
    ws.share.write_text("scripts/ddp.py", textwrap.dedent(DDP))
    doc = {
        "properties": {
            "nodeCount": 2,
            "pyTorchSettings": {
                "pythonScriptFilePath": "$AZ_BATCHAI_JOB_MOUNT_ROOT/afs/scripts/ddp.py",
                "communicationBackend": "gloo",
            },
            "mountVolumes": {
                "azureFileShares": [
                    {
                        "azureFileUrl": "https://batchaitest.file.core.windows.net/batchaishare",
                        "relativeMountPath": "afs",
                    }
                ]
            },
            "environmentVariables": [{"name": "GLOO_SOCKET_IFNAME", "value": "lo"}],
            "secrets": [{"name": "HF_TOKEN", "value": "tok-s3cret"}],
        }
    }
    exp = ws.create_experiment("mi", exist_ok=True)
    before = set(service.job_ids())
    job = Job.from_batchai_json(
        doc, experiment=exp, cluster="pool2", name="ddp", storage_account="batchaitest"
    ).submit()
    job_id = _only_job(service, before)
    assert job.state is JobState.QUEUED
    code = agent.run(job_id)
    assert code == 0, (service.files.get((job_id, "job", "stderr.txt")), job.tail("stderr.txt", 30))
    assert (job.state, job.exit_code) == (JobState.SUCCEEDED, 0), job.status.failure_reason
    lines = sorted(job.tail("stdout.txt", 10))
    assert lines == [
        "rank 0 of 2 node 0 sum 3 restart 0 token True",
        "rank 1 of 2 node 1 sum 3 restart 0 token True",
    ]
    names = {f.name for f in job.files()}
    assert {"execution-127.0.0.2.log", "execution-127.0.0.3.log"} <= names  # one rank per node
    result = ws.share.read_json(f"{layout.SHARE.run_dir('mi', 'ddp')}/batch-result.json")
    assert result["nodes"] == ADDRESSES and result["exit_code"] == 0


def test_a_custom_mpi_job_retried_by_the_service_resumes_as_its_next_attempt(lab: Any) -> None:
    ws, service, agent = lab
    exp = ws.create_experiment("mi", exist_ok=True)
    # rank 1 fails on the first attempt and succeeds once restarted (as a checkpointed job resumes)
    command = (
        "python3 -c \"import os,sys; r=os.environ['OMPI_COMM_WORLD_RANK']; "
        "n=os.environ['AZ_BATCHAI_JOB_RESTART_COUNT']; print('rank', r, 'attempt', n, flush=True); "
        "sys.exit(3 if n == '0' and r == '1' else 0)\""
    )
    before = set(service.job_ids())
    job = exp.create_job(
        "mpi", cluster="pool2", node_count=2, command_line=command, toolkit="custommpi", max_retries=1
    ).submit()
    job_id = _only_job(service, before)
    assert agent.run(job_id) == 3
    assert job.state is JobState.QUEUED  # the service put the task back in the queue
    result = ws.share.read_json(f"{layout.SHARE.run_dir('mi', 'mpi')}/batch-result.json")
    assert result["exit_code"] == 3 and "rank 1 on node 127.0.0.3 exited with code 3" in result["reason"]
    (attempt,) = job.attempts
    assert attempt["index"] == 0
    assert agent.run(job_id) == 0
    assert (job.state, job.exit_code) == (JobState.SUCCEEDED, 0)
    assert sorted(job.tail("stdout.txt", 2)) == ["rank 0 attempt 1", "rank 1 attempt 1"]
    assert (
        service.job_ids().count(job_id) == 1 and service.count("POST", r"/tasks$") == 2
    )  # 2 jobs, 1 task each


def test_a_node_without_the_share_fails_the_coordination_before_any_rank(lab: Any, tmp_path: Path) -> None:
    ws, service, agent = lab
    exp = ws.create_experiment("mi", exist_ok=True)
    before = set(service.job_ids())
    job = exp.create_job(
        "noshare", cluster="pool2", node_count=2, command_line="true", toolkit="custommpi"
    ).submit()
    job_id = _only_job(service, before)
    task = service.tasks[job_id]["job"]
    share_root = str(Path(ws.backend.share_root()))
    task["multiInstanceSettings"]["coordinationCommandLine"] = task["multiInstanceSettings"][
        "coordinationCommandLine"
    ].replace(share_root, str(tmp_path / "not-mounted"))  # as on a node whose mount failed
    assert agent.run(job_id) == 1
    status = job.status
    assert status.state is JobState.FAILED
    assert "the workspace share is not mounted" in (status.failure_reason or "")
