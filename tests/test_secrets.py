"""A job's secret reaches its ranks and nothing else the SDK writes or shows: no file in the workspace
(share and node-local scheduler state), no repr, no export, no error, no argv of the SDK's own processes
(the user's own script, given the value in its arguments, is exempt: the docs say so)."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from _procs import read_pid
from batchai_sdk import JobState, Workspace
from batchai_sdk.exceptions import ValidationError
from batchai_sdk.node.job import procs

pytestmark = pytest.mark.mpi

SCRIPT = """
import hashlib, os, pathlib, sys, time
token = sys.argv[2]
assert token == os.environ["API_TOKEN"], "argv and environment differ"
print("digest", hashlib.sha256(token.encode()).hexdigest(), flush=True)
pathlib.Path(sys.argv[3], "pid").write_text(str(os.getpid()))
while not pathlib.Path(sys.argv[3], "go").exists():
    time.sleep(0.05)
"""


def files_holding(root: Path, value: bytes) -> list[str]:
    found = []
    for p in root.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink() and value in p.read_bytes():
                found.append(str(p))
        except FileNotFoundError:
            continue  # a temporary file renamed away while we walked
    return found


def test_a_secret_reaches_the_rank_and_nothing_the_sdk_writes_or_shows(
    ws: Workspace, script: Callable[[str, str], Path], tmp_path: Path
) -> None:
    value = f"s3cr3t-{uuid.uuid4().hex}"
    gate = tmp_path / "gate"
    gate.mkdir()
    exp = ws.create_experiment("e")
    ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job(
        "secret",
        cluster="c",
        python_script=str(script("uses_token.py", SCRIPT)),
        args=["--token", "$API_TOKEN", str(gate)],
        secrets={"API_TOKEN": value},
    )
    shown = [repr(job), repr(job.spec), repr(ws), str(job.to_batchai_json()), str(job.spec.to_dict())]
    job.submit()
    deadline = time.monotonic() + 60
    while not (gate / "pid").exists():
        assert not job.state.ended and time.monotonic() < deadline, job.status.failure_reason
        time.sleep(0.05)
    user_pid = read_pid(gate / "pid")
    tag = next(
        e.split(b"=", 1)[1].decode()
        for e in Path(f"/proc/{user_pid}/environ").read_bytes().split(b"\0")
        if e.startswith(b"BATCHAI_JOB_TAG=")
    )
    ours = [p for p in procs.tagged_pids(tag) if p != user_pid]
    argvs = {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in ours}
    assert any(b"launch" in a.split(b"\0") for a in argvs.values())  # the launcher, mpirun, the rank shim
    assert any(b"rank" in a.split(b"\0") for a in argvs.values())
    assert [p for p, a in argvs.items() if value.encode() in a] == []
    assert value.encode() in Path(f"/proc/{user_pid}/cmdline").read_bytes()  # the user's own choice
    shown += [repr(job), repr(job.spec), str(job.to_dict()), repr(job.status)]
    (gate / "go").touch()
    assert job.wait(timeout=60, poll_interval=0.1) is JobState.SUCCEEDED, job.status.failure_reason
    assert job.tail() == [f"digest {hashlib.sha256(value.encode()).hexdigest()}"]
    time.sleep(2.5)  # the scheduler's idle exit: its last records are written
    root = Path(ws.backend.root)  # type: ignore[attr-defined]
    assert (root / "tmp" / "scheduler" / "c" / "scheduler.log").is_file()  # the state folder was walked
    assert files_holding(root, value.encode()) == []
    shown += [repr(job), str(job.to_batchai_json()), repr(exp.get_job("secret").spec), str(job.to_dict())]
    assert [s for s in shown if value in s] == []
    assert "***" in str(job.to_batchai_json())


@pytest.mark.parametrize("bad", [123456789012, b"bytes-s3cr3t-value", ["list-s3cr3t-value"]])
def test_the_error_for_a_secret_that_is_not_a_string_does_not_show_it(ws: Workspace, bad: object) -> None:
    exp = ws.create_experiment("e")
    ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    with pytest.raises(ValidationError) as err:
        exp.create_job("j", cluster="c", command_line="true", secrets={"API_TOKEN": bad})  # type: ignore[dict-item]
    shown = str(bad if not isinstance(bad, list) else bad[0])
    for text in (str(err.value), repr(err.value), repr(err.value.args), repr(vars(err.value))):
        assert shown not in text and repr(bad) not in text, text
