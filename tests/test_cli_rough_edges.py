"""The CLI's rough edges a newcomer met in the first hour, each as the user saw it: a command that needed a
flag no sibling needs, a report that dropped rows or said nothing of what it skipped, an error naming
``None``, a warning pointing into the console script, an error without the way out, and a hint
suggesting the command just run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchai_sdk.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> tuple[str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == status, f"batchai {' '.join(argv)} -> {code}\n{out}\n{err}"
    return out, err


@pytest.mark.slow
def test_cluster_check_needs_no_group_and_full_keeps_basics_rows_and_says_what_it_skipped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("torch")  # the rendezvous and the all-reduce are torch.distributed (gloo)
    cli(capsys, "cluster", "create", "-n", "c", "--target", "1")
    out, err = cli(capsys, "cluster", "check", "-n", "c")  # the default workspace, as `cluster show -n c`
    basic = json.loads(out)
    assert basic["unusable"] == {} and basic["checks"]
    assert "GPU count, ECC, throttling checks skipped" in err  # a CPU node: said, not silently left out
    out, err = cli(capsys, "cluster", "check", "-n", "c", "--level", "full")
    full = json.loads(out)
    rows = {(c["node"], c["check"]) for c in full["checks"]}
    assert {(c["node"], c["check"]) for c in basic["checks"]} <= rows  # full = basic + more
    assert any(check == "allreduce" for _, check in rows)
    assert "DCGM diagnostics checks skipped" in err and any("DCGM" in n for n in full["notes"])


def test_simulate_eviction_on_an_idle_cluster_says_no_job_runs(capsys: pytest.CaptureFixture[str]) -> None:
    cli(capsys, "cluster", "create", "-n", "idle", "--target", "1")
    _, err = cli(capsys, "cluster", "node", "simulate-eviction", "-n", "idle", status=1)
    assert "None" not in err
    assert "cluster 'idle' runs no job, so there is no node to evict: submit a job to it first" in err
    _, err = cli(capsys, "cluster", "node", "simulate-eviction", "-n", "idle", "--node", "vm_0", status=1)
    assert "invalid node: 'vm_0'; expected a node of cluster 'idle' that runs a job (now: none)" in err


def test_the_retired_size_warning_from_the_cli_is_one_line_without_the_console_scripts_path(
    tmp_path: Path,
) -> None:
    batchai = Path(sys.executable).parent / "batchai"  # the console script a user runs
    ran = subprocess.run(
        [str(batchai), "cluster", "create", "-n", "old", "--vm-size", "Standard_NC6", "--target", "0"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "default"},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.splitlines() == [
        "warning: Standard_NC6 was retired by Azure on 2023-09-06; it is only a label on the local "
        "backend (on Azure use Standard_NC4as_T4_v3, Standard_NC24ads_A100_v4)"
    ]


def test_a_job_on_a_missing_experiment_says_how_to_make_it(capsys: pytest.CaptureFixture[str]) -> None:
    cli(capsys, "cluster", "create", "-n", "c", "--target", "1")
    _, err = cli(capsys, "job", "create", "-e", "queue", "-c", "c", "-n", "j", "--command-line", "true",
                 status=1)  # fmt: skip
    assert err.strip() == (
        "error: experiment 'queue' not found in workspace 'local'; "
        "make it with `batchai experiment create -n queue`"
    )
    cli(capsys, "experiment", "create", "-n", "queue")  # the command it names works as written
    cli(capsys, "job", "create", "-e", "queue", "-c", "c", "-n", "j", "--command-line", "true")


@pytest.mark.mpi
def test_job_logs_of_stderr_does_not_end_by_suggesting_itself(capsys: pytest.CaptureFixture[str]) -> None:
    cli(capsys, "cluster", "create", "-n", "c", "--target", "1")
    cli(capsys, "job", "create", "-c", "c", "-n", "bad", "--command-line", "echo oops >&2; exit 3",
        "--stream", status=3)  # fmt: skip
    out, err = cli(capsys, "job", "logs", "-n", "bad", "--file-name", "stderr.txt", status=3)
    assert "oops" in out.splitlines()
    assert err.splitlines()[-1].startswith("job bad failed: rank 0 on node vm_0 exited with code 3: oops")
    assert "--file-name stderr.txt" not in err
    _, err = cli(capsys, "job", "logs", "-n", "bad", status=3)  # stdout.txt: stderr.txt is the next step
    assert (
        err.splitlines()[-1] == "the full output: batchai job logs -e default -n bad --file-name stderr.txt"
    )
