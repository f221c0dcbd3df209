"""The `batchai` CLI in-process: parsing, az-style output (json, table, tsv, --query), error lines, the
resource-group registry and the storage commands, on the local backend."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from batchai_sdk import Workspace
from batchai_sdk.cli import main
from batchai_sdk.cli._format import compile_query, format_table, format_tsv, generic_rows, render

G = ["-g", "batchai.horovod", "-w", "batchaidev"]


class CLI:
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = self.capsys.readouterr()
        return code, out, err

    def ok(self, *argv: str) -> str:
        code, out, err = self(*argv)
        assert code == 0, f"batchai {' '.join(argv)} -> {code}: {err}"
        return out

    def json(self, *argv: str) -> object:
        return json.loads(self.ok(*argv, "-o", "json"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    for var in ("AZURE_BATCHAI_STORAGE_ACCOUNT", "AZURE_BATCHAI_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT"):
        monkeypatch.delenv(var, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path / "home"


@pytest.fixture
def cli(home: Path, capsys: pytest.CaptureFixture[str]) -> CLI:
    return CLI(capsys)


@pytest.fixture
def tutorial(cli: CLI) -> CLI:
    """Resource group, workspace, experiment and a 2-node cluster, as in the tutorial."""
    cli.ok("group", "create", "--name", "batchai.horovod", "--location", "eastus")
    cli.ok("workspace", "create", "--resource-group", "batchai.horovod", "--workspace", "batchaidev")
    cli.ok("experiment", "create", *G, "--name", "cifar")
    cli.ok("cluster", "create", *G, "--name", "nc6cluster", "--vm-priority", "dedicated",
           "--vm-size", "Standard_NC6", "--target", "2", "--generate-ssh-keys")  # fmt: skip
    return cli


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    return lines[0]


# -- tables -------------------------------------------------------------------------------------------

TUTORIAL_FILES = """\
Name                                                    Type       Size  Modified
------------------------------------------------------  ------  -------  -------------------------
execution-tvm-676767296_1-20180718t174802z-p.log        file       8801  2018-07-18T22:41:28+00:00
stderr-job_prep-tvm-676767296_1-20180718t174802z-p.txt  file        238  2018-07-18T22:41:50+00:00
stderr.txt                                              file       7653  2018-07-18T22:46:32+00:00
stdout.txt                                              file    2316480  2018-07-18T22:46:32+00:00"""


def test_file_table_is_the_tutorials_layout() -> None:
    rows = []
    for line in TUTORIAL_FILES.splitlines()[2:]:
        name, kind, size, modified = line.split()
        rows.append({"Name": name, "Type": kind, "Size": int(size), "Modified": modified})
    assert format_table(rows) == TUTORIAL_FILES


def test_cluster_table_columns_and_values(tutorial: CLI) -> None:
    out = tutorial.ok("cluster", "show", "--name", "nc6cluster", "--workspace", "batchaidev",
                      "--resource-group", "batchai.horovod", "--output", "table")  # fmt: skip
    header, dashes, row = out.splitlines()
    # the tutorial's header and dashes, character for character
    assert header == (
        "Name        Resource Group    Workspace    VM Size       State      Idle    Running    Preparing"
        "    Leaving    Unusable"
    )
    assert dashes == (
        "----------  ----------------  -----------  ------------  -------  ------  ---------  -----------"
        "  ---------  ----------"
    )
    assert row.split() == ["nc6cluster", "batchai.horovod", "batchaidev", "STANDARD_NC6", "steady",
                           "2", "0", "0", "0", "0"]  # fmt: skip
    assert row.index("2") == header.index("Idle") + len("Idle") - 1  # numbers right-aligned


def test_query_and_output_formats(tutorial: CLI) -> None:
    show = ["cluster", "show", *G, "-n", "nc6cluster"]
    assert tutorial.json(*show, "--query", "nodeStateCounts") == {
        "idleNodeCount": 2,
        "leavingNodeCount": 0,
        "preparingNodeCount": 0,
        "runningNodeCount": 0,
        "unusableNodeCount": 0,
    }
    assert tutorial.ok(*show, "--query", "allocationState") == '"steady"\n'  # az prints JSON by default
    assert tutorial.ok(*show, "--query", "allocationState", "-o", "tsv") == "steady\n"
    # tsv as az: a list gives one line per item, a row is a list inside it
    assert tutorial.ok(*show, "--query", "[name, vmSize]", "-o", "tsv") == "nc6cluster\nSTANDARD_NC6\n"
    assert tutorial.ok(*show, "--query", "[[name, vmSize]]", "-o", "tsv") == "nc6cluster\tSTANDARD_NC6\n"
    # global options also work before the command, as in az
    assert tutorial.ok("-o", "tsv", "--query", "name", *show) == "nc6cluster\n"
    # with --query the table shows the query's result, not the cluster layout
    assert tutorial.ok(*show, "--query", "{n: name, t: targetNodeCount}", "-o", "table").splitlines() == [
        "N             T",
        "----------  ---",
        "nc6cluster    2",
    ]
    assert tutorial.ok(*show, "-o", "none") == ""
    listed = tutorial.json("cluster", "list", *G)
    assert isinstance(listed, list) and [c["name"] for c in listed] == ["nc6cluster"]


def test_profile_defaults_replace_flags(tutorial: CLI) -> None:
    tutorial.ok("configure", "--defaults", "group=batchai.horovod", "workspace=batchaidev", "output=tsv")
    assert tutorial.ok("cluster", "show", "-n", "nc6cluster", "--query", "name") == "nc6cluster\n"
    assert (
        tutorial.ok("cluster", "show", "-n", "nc6cluster", "--query", "name", "-o", "json")
        == '"nc6cluster"\n'
    )
    tutorial.ok("configure", "--defaults", "output=")
    assert tutorial.ok("cluster", "show", "-n", "nc6cluster", "--query", "name") == '"nc6cluster"\n'


def test_generic_output_rules() -> None:
    data = [{"name": "a", "n": 1, "nested": {"x": 1}, "items": [1, 2], "ok": True, "none": None}]
    assert generic_rows(data) == [{"Name": "a", "N": 1, "Ok": True, "None": None}]
    assert format_tsv(data) == "a\t1\t\t2\ttrue\t"
    assert format_tsv("x") == "x"
    assert render([], output="table") == ""
    assert render({"a": [1, 2]}, output="json", query=compile_query("a[1]")) == "2"
    with pytest.raises(ValueError, match="invalid JMESPath"):
        compile_query("[?")


# -- usage errors and error lines ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["cluster", "show", "-w", "w", "-n", "x"],
            ["--resource-group/-g is required", "configure --defaults group="],
        ),
        (["cluster", "show", "-g", "g", "-w", "w"], ["batchai cluster show", "required: --name/-n"]),
        (["clusterz"], ["invalid choice: 'clusterz'"]),
        (["cluster"], ["required: COMMAND"]),
        (["cluster", "show", "-g", "g", "-w", "w", "-n", "c", "--query", "[?"], ["invalid JMESPath"]),
        (["cluster", "show", "-g", "g", "-w", "w", "-n", "c", "-o", "xml"], ["invalid choice: 'xml'"]),
        (["cluster", "resize", "-g", "g", "-w", "w", "-n", "c", "--target", "-1"], ["integer >= 0"]),
        (["job", "create", *G, "-e", "cifar", "-n", "j", "-c", "c"], ["--config-file, or --python-script"]),
        (["group", "delete", "--name", "batchai.horovod"], ["--yes"]),
    ],
)
def test_usage_errors_exit_2_with_one_line(tutorial: CLI, argv: list[str], words: list[str]) -> None:
    code, out, err = tutorial(*argv)
    assert code == 2
    line = one_error_line(err)
    for word in words:
        assert word in line
    assert out == ""


def test_sdk_errors_exit_1_with_one_line_and_debug_adds_the_traceback(tutorial: CLI) -> None:
    code, _, err = tutorial("cluster", "show", *G, "-n", "nope")
    assert code == 1
    assert one_error_line(err) == "error: cluster 'nope' not found in workspace 'batchaidev'"
    code, _, err = tutorial("cluster", "show", "-g", "other", "-w", "batchaidev", "-n", "nope")
    assert code == 1
    assert "batchai group create --name other" in one_error_line(err)
    code, _, err = tutorial("cluster", "show", *G, "-n", "nope", "--debug")
    assert code == 1
    assert "Traceback" in err and err.rstrip().endswith(
        "error: cluster 'nope' not found in workspace 'batchaidev'"
    )
    code, _, err = tutorial("cluster", "create", *G, "-n", "bad name", "-s", "Standard_NC4as_T4_v3")
    assert code == 1
    assert "cluster name" in one_error_line(err)


def test_job_json_errors_name_the_json_path(tutorial: CLI, tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"properties": {"horovodSettings": {"pythonScriptPath": "x.py"}}}))
    create = ["job", "create", *G, "-e", "cifar", "-c", "nc6cluster", "-n", "j", "--config-file", str(job)]
    code, _, err = tutorial(*create)
    assert code == 1
    assert "unknown field properties.horovodSettings.pythonScriptPath" in one_error_line(err)
    tutorial_json = Path(__file__).parent / "data" / "tutorial_job.json"
    create[-1] = str(tutorial_json)
    code, _, err = tutorial(*create)
    assert code == 1
    line = one_error_line(err)
    assert "azureFileShares[0].azureFileUrl" in line and "--storage-account-name" in line
    # nodeCount 4 exceeds the 2-node cluster: the SDK refuses before anything runs
    code, _, err = tutorial(*create, "--storage-account-name", "mystorageaccount")
    assert code == 1
    assert "the job needs 4 node(s) but cluster 'nc6cluster' has 2" in one_error_line(err)
    code, _, err = tutorial(*create[:-2], "--config-file", str(tmp_path / "missing.json"))
    assert code == 1
    assert "not found" in one_error_line(err)


def test_help_and_version(cli: CLI) -> None:
    code, out, _ = cli("--help")
    assert code == 0 and "workspace" in out and "storage" in out
    code, out, _ = cli("job", "file", "stream", "--help")
    assert code == 0 and "--file-name" in out and "--job" in out
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("batchai ")


# -- resources ----------------------------------------------------------------------------------------


def test_workspace_create_is_idempotent_and_listed(tutorial: CLI, home: Path) -> None:
    first = tutorial.json("workspace", "show", *G)
    again = tutorial.json("workspace", "create", *G)
    assert isinstance(first, dict) and isinstance(again, dict)
    assert again["creationTime"] == first["creationTime"]
    assert first["backend"] == "local" and first["location"] == "eastus"
    assert Path(first["root"]) == home / "groups" / "batchai.horovod" / "workspaces" / "batchaidev"
    table = tutorial.ok("workspace", "list", "-o", "table").splitlines()
    assert table[0].split() == ["Name", "Resource", "Group", "Location", "Backend"]
    assert table[2].split() == ["batchaidev", "batchai.horovod", "eastus", "local"]
    code, _, err = tutorial("workspace", "create", "-g", "nogroup", "-w", "x")
    assert code == 1 and "resource group 'nogroup' not found" in one_error_line(err)


def test_experiments(tutorial: CLI) -> None:
    tutorial.ok("experiment", "create", *G, "-n", "second")
    names = tutorial.ok("experiment", "list", *G, "--query", "[].name", "-o", "tsv").split()
    assert names == ["cifar", "second"]
    tutorial.ok("experiment", "delete", *G, "-n", "second", "--yes")
    assert tutorial.ok("experiment", "list", *G, "--query", "[].name", "-o", "tsv").split() == ["cifar"]


def test_cluster_resize_and_delete(tutorial: CLI) -> None:
    out = tutorial.ok("cluster", "resize", "--name", "nc6cluster", "--resource-group", "batchai.horovod",
                      "--target", "0", "--workspace", "batchaidev", "-o", "table")  # fmt: skip
    assert out.splitlines()[2].split()[4:] == ["steady", "0", "0", "0", "0", "0"]
    tutorial.ok("cluster", "delete", *G, "-n", "nc6cluster", "--yes")
    assert tutorial.json("cluster", "list", *G) == []


def test_ssh_key_flags_are_accepted_with_a_note(tutorial: CLI) -> None:
    code, _, err = tutorial("cluster", "create", *G, "-n", "c2", "-s", "Standard_NC6", "--generate-ssh-keys",
                            "-p", "hunter2")  # fmt: skip
    assert code == 0
    assert "--generate-ssh-keys has no effect on the local backend" in err
    assert "hunter2" not in err
    code, _, err = tutorial("cluster", "create", *G, "-n", "c3", "-s", "Standard_NC6", "--generate-ssh-keys",
                            "--only-show-errors")  # fmt: skip
    assert code == 0 and err == ""


def test_ssh_backend_needs_its_profile(tutorial: CLI) -> None:
    tutorial.ok("configure", "--backend", "ssh", "--user", "azureuser")
    code, _, err = tutorial("workspace", "create", "-g", "batchai.horovod", "-w", "lab")
    assert code == 2
    assert "--hosts, --share-root" in one_error_line(err)
    # existing workspaces keep the backend they were made with
    assert tutorial.json("workspace", "show", *G)["backend"] == "local"  # type: ignore[index]


def test_group_delete_removes_workspaces_and_files(tutorial: CLI, home: Path) -> None:
    root = home / "groups" / "batchai.horovod" / "workspaces" / "batchaidev"
    assert root.is_dir()
    assert tutorial.ok("group", "exists", "-n", "batchai.horovod") == "true\n"
    tutorial.ok("group", "delete", "--name", "batchai.horovod", "--yes")
    assert not root.exists()
    assert tutorial.ok("group", "exists", "-n", "batchai.horovod") == "false\n"
    assert tutorial.json("group", "list") == []


# -- storage ------------------------------------------------------------------------------------------

ACCOUNT = ["--account-name", "mystorageaccount"]


@pytest.fixture
def storage(tutorial: CLI) -> CLI:
    tutorial.ok("storage", "account", "create", "--resource-group", "batchai.horovod", "--name",
                "mystorageaccount", "--location", "eastus", "--sku", "Standard_LRS")  # fmt: skip
    assert tutorial.json("storage", "share", "create", "--name", "myshare", *ACCOUNT) == {"created": True}
    assert tutorial.json("storage", "directory", "create", "--name", "cifar", "--share-name", "myshare",
                         *ACCOUNT) == {"created": True}  # fmt: skip
    return tutorial


def test_storage_maps_onto_the_workspace_share(storage: CLI, home: Path, tmp_path: Path) -> None:
    script = Path("cifar_cnn_distributed.py")
    script.write_text("print('hi')\n")
    up = storage.json("storage", "file", "upload", "--path", "cifar", "--share-name", "myshare",
                      "--source", str(script), *ACCOUNT)  # fmt: skip
    assert isinstance(up, dict) and up["path"] == "cifar/cifar_cnn_distributed.py"
    ws = Workspace.local(root=home / "groups" / "batchai.horovod" / "workspaces" / "batchaidev")
    assert ws.share.read_text("cifar/cifar_cnn_distributed.py") == "print('hi')\n"
    # an explicit file path, creating its folders
    storage.ok("storage", "file", "upload", "-p", "cifar/sub/renamed.py", "-s", "myshare", "--source",
               str(script), *ACCOUNT)  # fmt: skip
    assert ws.share.exists("cifar/sub/renamed.py")
    table = storage.ok("storage", "file", "list", "-s", "myshare", "-p", "cifar", *ACCOUNT, "-o", "table")
    rows = [line.split() for line in table.splitlines()[2:]]
    assert rows[0][:3] == ["cifar_cnn_distributed.py", "file", "12"]
    assert rows[1][:2] == ["sub", "directory"] and len(rows[1]) == 3  # a directory has no size
    # download without --dest: into the working directory, under the file's name
    script.unlink()
    storage.ok(
        "storage", "file", "download", "--path", "cifar/sub/renamed.py", "--share-name", "myshare", *ACCOUNT
    )
    assert Path("renamed.py").read_text() == "print('hi')\n"
    dest = tmp_path / "out"
    dest.mkdir()
    storage.ok("storage", "file", "download", "-p", "cifar/sub/renamed.py", "-s", "myshare", "--dest",
               str(dest), *ACCOUNT)  # fmt: skip
    assert (dest / "renamed.py").is_file()
    code, _, err = storage("storage", "file", "download", "-p", "cifar/nope.py", "-s", "myshare", *ACCOUNT)
    assert code == 1 and "cifar/nope.py" in one_error_line(err)


def test_storage_names_are_checked(storage: CLI) -> None:
    # several shares per account, as az storage: the second is a share of its own
    assert storage.json("storage", "share", "create", "--name", "othershare", *ACCOUNT) == {"created": True}
    assert storage.json("storage", "share", "create", "--name", "myshare", *ACCOUNT) == {"created": False}
    code, _, err = storage("storage", "directory", "create", "-n", "x", "-s", "unknownshare", *ACCOUNT)
    assert code == 1 and "batchai storage share create" in one_error_line(err)
    code, _, err = storage("storage", "account", "create", "-g", "batchai.horovod", "-n", "My_Account")
    assert code == 1 and "3-24 lowercase" in one_error_line(err)
    accounts = storage.ok("storage", "account", "list", "-o", "table").splitlines()
    assert accounts[2].split() == ["mystorageaccount", "batchai.horovod", "eastus", "Standard_LRS"]
    shown = storage.json("storage", "account", "show", "-n", "mystorageaccount")
    assert isinstance(shown, dict) and shown["shares"] == {"myshare": "batchaidev", "othershare": None}
    storage.ok("group", "create", "-n", "other", "-l", "westus")
    code, _, err = storage("storage", "account", "create", "-g", "other", "-n", "mystorageaccount")
    assert code == 1 and "already exists" in one_error_line(err)
    code, _, err = storage(
        "storage", "directory", "create", "-n", "x", "-s", "myshare", "--account-name", "nope123"
    )
    assert code == 1 and "storage account 'nope123' not found" in one_error_line(err)
    # a second workspace in the group: --workspace names its own share; a workspace's share has one name
    storage.ok("workspace", "create", "-g", "batchai.horovod", "-w", "second")
    assert storage.json(
        "storage", "share", "create", "--name", "share2", "--workspace", "second", *ACCOUNT
    ) == {"created": True}
    code, _, err = storage("storage", "share", "create", "--name", "share3", "-w", "second", *ACCOUNT)
    assert code == 1 and "already named 'share2'" in one_error_line(err)


# -- jobs (real mpirun) ---------------------------------------------------------------------------------

FAILING = """\
    import sys
    sys.stdout.write(f"rank output {sys.argv[1:]}\\n")
    sys.exit(3)
"""


@pytest.mark.mpi
def test_job_from_flags_failure_is_the_exit_status(tutorial: CLI, tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text(textwrap.dedent(FAILING))
    job = ["-e", "cifar", *G]
    created = tutorial.json("job", "create", *job, "-n", "fails", "-c", "nc6cluster", "--nodes", "2",
                            "--python-script", str(script), "--script-args", "--alpha 'b c'")  # fmt: skip
    assert isinstance(created, dict) and created["nodeCount"] == 2
    code, out, _ = tutorial("job", "wait", *job, "-n", "fails", "--interval", "0.2", "--query", "executionState",
                            "-o", "tsv")  # fmt: skip
    assert out == "failed\n"
    assert code == 3
    code, stream, err = tutorial("job", "file", "stream", *job, "-j", "fails", "-f", "stdout.txt")
    assert stream.count("rank output ['--alpha', 'b c']") == 2
    assert code == 3 and "job fails failed: rank" in err  # the output, then why, as job wait says it
    table = tutorial.ok("job", "list", *job, "-o", "table").splitlines()
    assert table[0].split() == [
        "Name",
        "Resource",
        "Group",
        "Cluster",
        "Cluster",
        "RG",
        "Nodes",
        "State",
        "Exit",
        "code",
        "Waiting",
        "for",
    ]
    assert table[2].split() == [
        "fails",
        "batchai.horovod",
        "nc6cluster",
        "batchai.horovod",
        "2",
        "failed",
        "3",
    ]
    tutorial.ok("job", "file", "download", *job, "-j", "fails", "-f", "stdout.txt")
    assert "rank output" in Path("stdout.txt").read_text()
    code, _, err = tutorial(
        "job", "create", *job, "-n", "fails", "-c", "nc6cluster", "--python-script", str(script)
    )
    assert code == 1 and "already exists" in one_error_line(err)
    tutorial.ok("job", "delete", *job, "-n", "fails", "--yes")
    assert tutorial.json("job", "list", *job) == []


@pytest.mark.mpi
def test_job_terminate(tutorial: CLI, tmp_path: Path) -> None:
    script = tmp_path / "sleepy.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(300)\n")
    job = ["-e", "cifar", *G]
    tutorial.ok("job", "create", *job, "-n", "sleepy", "-c", "nc6cluster", "--python-script", str(script))
    code, _, err = tutorial("job", "terminate", *job, "-n", "sleepy")
    assert code == 2 and "--yes" in one_error_line(err)
    out = tutorial.ok(
        "job", "terminate", *job, "-n", "sleepy", "--yes", "--query", "executionState", "-o", "tsv"
    )
    assert out == "terminated\n"
    code, out, _ = tutorial("job", "wait", *job, "-n", "sleepy", "--query", "executionState", "-o", "tsv")
    assert code != 0 and out == "terminated\n"  # a job that did not succeed fails `job wait`


def test_console_script_entry_point_is_main() -> None:
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "batchai"]
    assert ep.value == "batchai_sdk.cli:main"
    assert sys.modules["batchai_sdk.cli"].main is ep.load()
