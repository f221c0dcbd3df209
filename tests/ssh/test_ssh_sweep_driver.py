"""A sweep's one driver and its hung trials on real sshd nodes (issue 35, item 8; the local twins are in
tests/test_sweeps.py): the driver's lease lives on the share the SSH backend reaches over SFTP, a second
resumer in another process is told who drives (or waits and then says so), a driver killed while holding
the sweep is taken over at once with nothing run twice (also when it died between staging a trial and
queuing it), the CLI names the live driver in one line, and a trial silent for the sweep's
``trial_hang_timeout`` is ended by its job's watchdog on the node, counted failed, and frees its slot."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from _labs import lab_root, ssh_lab
from batchai_sdk import SweepDrivenError, Workspace
from batchai_sdk.cli import main

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]
WORKSPACE = "sweeps"

lab = ssh_lab(NODE_ADDRESSES[:1])

QUICK = """
    import argparse, time
    from batchai_sdk import log_metric
    p = argparse.ArgumentParser(); p.add_argument("--x", type=int); a = p.parse_args()
    time.sleep(3)
    log_metric(1, x=a.x)
"""

HANGING = """
    import argparse, time
    p = argparse.ArgumentParser(); p.add_argument("--x", type=int); a = p.parse_args()
    print("started", flush=True)
    if a.x == 1:
        time.sleep(600)  # silent: hung
    print("done", flush=True)
"""

# Another process opens the same SSH workspace (the options SSHNodes.workspace gives it) and drives the sweep.
DRIVE = """
import json, sys
from batchai_sdk import Workspace
o = json.loads(sys.argv[1])
ws = Workspace.ssh(o.pop("name"), **o)
ws.get_experiment("tune").get_sweep("one").run(poll_interval=0.2)
"""


def write(tmp_path: Path, name: str, source: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def same_workspace(lab: Workspace, nodes: SSHNodes) -> str:
    """What ``Workspace.ssh`` was given for ``lab`` (JSON), for a second process to open it."""
    root = lab_root(lab)
    return json.dumps({
        "name": WORKSPACE, "hosts": list(NODE_ADDRESSES[:1]), "user": nodes.user, "key_file": str(nodes.key_file),
        "port": nodes.port, "trust_on_first_use": True, "authorized_keys_path": str(nodes.authorized_keys),
        "share_path": str(root / "mnt" / "share"), "state_dir": str(root / "client_state"),
        "node_state_dir": str(root / "node_state"), "python": sys.executable, "tcp_interface": "lo",
        "connect_timeout": 5.0,
    })  # fmt: skip


def test_a_second_driver_on_ssh_nodes_is_told_who_drives_and_a_dead_one_is_taken_over(
    lab: Workspace, ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    exp = lab.create_experiment("tune")
    cluster = lab.create_cluster("one", nodes=1)
    sweep = exp.sweep("one", grid={"x": [1, 2]}, max_concurrent=1, cluster=cluster,
                      python_script=write(tmp_path, "quick.py", QUICK))  # fmt: skip
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVE, same_workspace(lab, ssh_nodes)], stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 90
        while "one-000" not in sweep.jobs():  # the first driver has submitted its first trial
            assert time.monotonic() < deadline and driver.poll() is None, (
                driver.stderr and driver.stderr.read()
            )
            time.sleep(0.2)
        # a second driver is told who drives (a typed error naming the first's pid), or waits, then says so
        with pytest.raises(SweepDrivenError, match=rf"is driven by host '.+' pid {driver.pid} \(since"):
            exp.get_sweep("one").run(timeout=5)
        with pytest.raises(
            TimeoutError, match=rf"sweep 'one''s driver \(host .+ pid {driver.pid} .*\) to stop"
        ):
            exp.get_sweep("one").run(timeout=1, poll_interval=0.2, wait_for_driver=True)
        assert driver.poll() is None  # the first driver drives on, untroubled
    finally:
        driver.kill()  # the driver dies holding the sweep
        _, err = driver.communicate()
    assert "Traceback" not in err.replace("KeyboardInterrupt", ""), err
    started = time.monotonic()
    rows = exp.get_sweep("one").run(timeout=120, poll_interval=0.2).to_dict("records")
    assert [r["state"] for r in rows] == ["succeeded", "succeeded"]  # taken over, nothing run twice
    assert time.monotonic() - started < 45  # at once on its own host, not after the 60 s lease
    assert len(exp.get_job("one-000").attempts) == 1
    assert len(exp.get_job("one-001").attempts) == 1


CLI_DRIVE = """
import sys
from batchai_sdk import Workspace
Workspace.from_cli("lab.rg", "lab").get_experiment("tune").get_sweep("one").run(poll_interval=0.2)
"""


def test_a_trial_its_killed_driver_staged_but_never_queued_is_submitted_again(
    lab: Workspace, ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    exp = lab.create_experiment("staged")
    cluster = lab.create_cluster("staged", nodes=1)
    sweep = exp.sweep("one", grid={"x": [1, 2]}, max_concurrent=1, cluster=cluster,
                      python_script=write(tmp_path, "quick.py", QUICK))  # fmt: skip
    drive = DRIVE.replace('"tune"', '"staged"')
    driver = subprocess.Popen([sys.executable, "-c", drive, same_workspace(lab, ssh_nodes)])
    try:
        deadline = time.monotonic() + 90
        while (
            "one-000" not in sweep.jobs()
        ):  # staged on the share; its request to the scheduler is on its way
            assert time.monotonic() < deadline and driver.poll() is None
            time.sleep(0.01)
    finally:
        driver.kill()  # killed between staging the trial and handing it to the head node's scheduler
        driver.wait()
    rows = exp.get_sweep("one").run(timeout=60, poll_interval=0.2).to_dict("records")
    assert [r["state"] for r in rows] == ["succeeded", "succeeded"]  # not "queued" for ever
    assert len(exp.get_job("one-000").attempts) == 1


def test_the_cli_names_the_driver_of_a_sweep_on_ssh_nodes_in_one_line(
    ssh_nodes: SSHNodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    share_root = tmp_path / "mnt" / "share"
    share_root.mkdir(parents=True)
    assert main(["configure", "--backend", "ssh", "--hosts", NODE_ADDRESSES[0], "--user", ssh_nodes.user,
                 "--key-file", str(ssh_nodes.key_file), "--share-root", str(share_root),
                 "--port", str(ssh_nodes.port), "--trust-on-first-use"]) == 0  # fmt: skip
    profile_path = tmp_path / "home" / "profile.json"
    profile = json.loads(profile_path.read_text())
    profile["ssh"].update(node_state_dir=str(tmp_path / "node_state"), python=sys.executable,
                          authorized_keys_path=str(ssh_nodes.authorized_keys), tcp_interface="lo",
                          connect_timeout=5.0)  # fmt: skip
    profile_path.write_text(json.dumps(profile))
    assert main(["group", "create", "--name", "lab.rg", "--location", "onprem"]) == 0
    assert main(["workspace", "create", "-g", "lab.rg", "-w", "lab"]) == 0
    ws = Workspace.from_cli("lab.rg", "lab")
    try:
        exp = ws.create_experiment("tune")
        cluster = ws.create_cluster("c", nodes=1)
        sweep = exp.sweep("one", grid={"x": [1, 2]}, max_concurrent=1, cluster=cluster,
                          python_script=write(tmp_path, "quick.py", QUICK))  # fmt: skip
        driver = subprocess.Popen([sys.executable, "-c", CLI_DRIVE])
        try:
            deadline = time.monotonic() + 90
            while "one-000" not in sweep.jobs():
                assert time.monotonic() < deadline and driver.poll() is None
                time.sleep(0.2)
            capsys.readouterr()
            code = main(["sweep", "show", "-g", "lab.rg", "-w", "lab", "-e", "tune", "-n", "one", "--run"])
            err = capsys.readouterr().err
            assert code == 1 and f"pid {driver.pid}" in err and "Traceback" not in err, err
        finally:
            driver.kill()
            driver.wait()
        rows = exp.get_sweep("one").run(timeout=120, poll_interval=0.2).to_dict("records")
        assert [r["state"] for r in rows] == ["succeeded", "succeeded"]
        assert len(exp.get_job("one-000").attempts) == 1
    finally:
        ws.close()


def test_a_silent_trial_on_an_ssh_node_is_ended_after_the_trial_hang_timeout_and_frees_its_slot(
    lab: Workspace, tmp_path: Path
) -> None:
    exp = lab.create_experiment("hangs")
    cluster = lab.create_cluster("hang", nodes=1)
    sweep = exp.sweep("hang", grid={"x": [1, 2]}, max_concurrent=1, trial_hang_timeout=3, cluster=cluster,
                      python_script=write(tmp_path, "hanging.py", HANGING))  # fmt: skip
    started = time.monotonic()
    rows = sweep.run(timeout=120, poll_interval=0.2).to_dict("records")
    assert [r["state"] for r in rows] == ["failed", "succeeded"]  # the hung one freed its only slot
    assert "possible hang" in rows[0]["note"], rows[0]["note"]
    assert time.monotonic() - started < 90  # ended near its 3 s, not after its 600 s sleep
