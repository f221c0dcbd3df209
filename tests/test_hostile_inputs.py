"""Hostile names, records and symbolic links on the local backend: nothing outside a job's own folders is
read, followed or deleted in its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchai_sdk import JobState, Workspace
from batchai_sdk.cli import main
from batchai_sdk.exceptions import ValidationError
from batchai_sdk.job import Job


def sentinels(ws: Workspace, tmp_path: Path) -> list[Path]:
    """Files a delete must never touch: user data in the share, another experiment's job, a file beside
    the workspace."""
    share = Path(ws.share.root)  # type: ignore[attr-defined]
    made = [
        share / "user_data" / "keep.txt",
        share / ".batchai" / "experiments" / "other" / "jobs" / "victim" / "keep.txt",
        tmp_path / "outside" / "keep.txt",
    ]
    for path in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("precious")
    return made


def finished_job(ws: Workspace, name: str, command: str = "echo hi", **options: object) -> Job:
    exp = ws.get_experiment("e") if any(e.name == "e" for e in ws.list_experiments()) else None
    exp = exp or ws.create_experiment("e")
    if not ws.list_clusters():
        ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job(name, cluster="c", command_line=command, **options).submit()  # type: ignore[arg-type]
    assert job.wait(timeout=60, poll_interval=0.1) is JobState.SUCCEEDED, job.status.failure_reason
    return job


@pytest.mark.parametrize(
    "field", ["stdouterr", "job_dir", "record", "wd", "prefix", "outputs"], ids=lambda f: f"paths.{f}"
)
def test_a_record_with_hostile_paths_deletes_only_the_job_folder(
    ws: Workspace, tmp_path: Path, field: str
) -> None:
    keep = sentinels(ws, tmp_path)
    job = finished_job(ws, "j")
    share = Path(ws.share.root)  # type: ignore[attr-defined]
    record_path = share / job.paths.record
    record = json.loads(record_path.read_text())
    hostile = {"outputs": {"X": ""}, "prefix": "../.."}.get(field, "")
    record["paths"][field] = hostile
    record_path.write_text(json.dumps(record))
    ws.get_experiment("e").get_job("j").delete()
    assert all(p.read_text() == "precious" for p in keep)
    assert not (share / job.paths.job_dir).exists()
    assert (share / ".batchai" / "experiments" / "e" / "experiment.json").is_file()


def test_a_spec_naming_another_job_is_refused_and_deletes_nothing(ws: Workspace, tmp_path: Path) -> None:
    keep = sentinels(ws, tmp_path)
    victim = finished_job(ws, "victim")
    finished_job(ws, "evil")
    share = Path(ws.share.root)  # type: ignore[attr-defined]
    record_path = share / ".batchai" / "experiments" / "e" / "jobs" / "evil" / "job.json"
    record = json.loads(record_path.read_text())
    record["spec"]["name"] = "victim"  # the record in evil's folder claims to be victim
    record_path.write_text(json.dumps(record))
    exp = ws.get_experiment("e")
    with pytest.raises(ValidationError):
        exp.get_job("evil")
    with pytest.raises(ValidationError):
        exp.delete_job("evil")
    assert (share / victim.paths.stdouterr / "stdout.txt").read_text() == "hi\n"
    assert exp.get_job("victim").state is JobState.SUCCEEDED
    assert all(p.read_text() == "precious" for p in keep)


@pytest.mark.parametrize(
    "name", ["../../other/jobs/victim", "../victim", "-rf", "a/b", ".", "..", "", "x" * 65, "v\nx"]
)
def test_hostile_job_names_are_refused_before_any_io(ws: Workspace, tmp_path: Path, name: str) -> None:
    keep = sentinels(ws, tmp_path)
    exp = ws.create_experiment("e")
    share = Path(ws.share.root)  # type: ignore[attr-defined]
    hidden = share.with_name("share.away")
    share.rename(hidden)  # with no share at all, a refusal that came after reading would be NotFoundError
    try:
        with pytest.raises(ValidationError):
            exp.get_job(name)
        with pytest.raises(ValidationError):
            exp.delete_job(name)
    finally:
        hidden.rename(share)
    assert all(p.read_text() == "precious" for p in keep)


def test_the_cli_refuses_a_job_delete_with_a_traversal_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    g = ["-g", "rg", "-w", "w"]
    for argv in (
        ["group", "create", "--name", "rg", "--location", "eastus"],
        ["workspace", "create", *g],
        ["experiment", "create", *g, "--name", "e"],
        ["experiment", "create", *g, "--name", "x"],
    ):
        assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    for name in ("../../x", "../x", "-rf"):
        code = main(["job", "delete", *g, "-e", "e", f"--name={name}", "-y"])
        err = capsys.readouterr().err
        assert code != 0
        assert err.startswith("error: ") and "Traceback" not in err, err
        assert "job name" in err, err
    assert main(["experiment", "show", *g, "-n", "x", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "x"


PLANT = (
    "echo mine > $AZ_BATCHAI_OUTPUT_OUT/real.txt"
    " && ln -s {outside}/secret.txt $AZ_BATCHAI_OUTPUT_OUT/file_link"
    " && ln -s {outside}/dir $AZ_BATCHAI_OUTPUT_OUT/dir_link"
    " && ln -s / $AZ_BATCHAI_OUTPUT_OUT/root_link"
    " && ln -s {outside}/secret.txt $AZ_BATCHAI_STDOUTERR_DIR/log_link"
)


def planted_job(ws: Workspace, tmp_path: Path) -> tuple[Job, Path]:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_text("OUTSIDE\n")
    (outside / "dir" / "in_dir.txt").write_text("OUTSIDE\n")
    job = finished_job(
        ws,
        "planter",
        PLANT.format(outside=outside),
        output_directories={"OUT": "$AZ_BATCHAI_JOB_MOUNT_ROOT/out"},
    )
    return job, outside


def test_links_a_job_plants_out_of_the_share_are_not_followed_by_downloads(
    ws: Workspace, tmp_path: Path
) -> None:
    job, _ = planted_job(ws, tmp_path)
    dest = tmp_path / "dl"
    dest.mkdir()
    got = ws.share.download(job.paths.outputs["OUT"], dest)
    files = sorted(p.relative_to(got).as_posix() for p in got.rglob("*"))
    assert files == ["real.txt"]
    with pytest.raises(ValidationError):
        job.download("file_link", tmp_path / "f", directory="OUT")
    with pytest.raises(ValidationError):
        job.download("dir_link", tmp_path / "d", directory="OUT")
    with pytest.raises(ValidationError):
        job.download("log_link", tmp_path / "l")
    logs = ws.share.download(job.paths.stdouterr, dest)
    assert "log_link" not in {p.name for p in logs.iterdir()}
    assert not (tmp_path / "f").exists() and not (tmp_path / "d").exists() and not (tmp_path / "l").exists()
    assert b"OUTSIDE" not in b"".join(p.read_bytes() for p in dest.rglob("*") if p.is_file())


def test_links_a_job_plants_out_of_the_share_are_not_followed_by_delete(
    ws: Workspace, tmp_path: Path
) -> None:
    keep = sentinels(ws, tmp_path)
    job, outside = planted_job(ws, tmp_path)
    job.delete()
    assert (outside / "secret.txt").read_text() == "OUTSIDE\n"
    assert (outside / "dir" / "in_dir.txt").read_text() == "OUTSIDE\n"
    assert all(p.read_text() == "precious" for p in keep)
    share = Path(ws.share.root)  # type: ignore[attr-defined]
    assert not (share / job.paths.outputs["OUT"]).exists() and not (share / job.paths.job_dir).exists()


def test_a_job_that_turns_its_output_folder_into_a_link_cannot_make_delete_follow_it(
    ws: Workspace, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    (outside / "OUT").mkdir(parents=True)
    (outside / "OUT" / "precious.txt").write_text("precious")
    # the job swaps the folder that holds its output directory for a link to a folder outside the share
    job = finished_job(
        ws,
        "swapper",
        f"d=$(dirname $AZ_BATCHAI_OUTPUT_OUT); rm -rf $d && ln -s {outside} $d",
        output_directories={"OUT": "$AZ_BATCHAI_JOB_MOUNT_ROOT/out"},
    )
    with pytest.raises(ValidationError):
        job.download("precious.txt", tmp_path / "p", directory="OUT")
    job.delete()
    assert (outside / "OUT" / "precious.txt").read_text() == "precious"


@pytest.mark.parametrize("mount_path", ["../x", "a/../../x", "..", "/abs"])
def test_a_mount_path_with_dot_dot_is_refused_in_the_python_api(ws: Workspace, mount_path: str) -> None:
    exp = ws.create_experiment("e")
    ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    with pytest.raises(ValidationError) as err:
        exp.create_job("j", cluster="c", command_line="true", mount_path=mount_path)
    assert err.value.field == "mount_path"
    assert exp.list_jobs() == []
