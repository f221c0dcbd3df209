"""No secret in any error: every secret-bearing field, given an invalid value (or sitting beside one), gets a
ValidationError that names the field and shows "***" for the secret — in its message, ``value``, ``args``
and repr — and the CLI prints none of it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk import Workspace
from batchai_sdk.cli import main
from batchai_sdk.exceptions import ValidationError

SECRET = "S2V5LW9mLXRoZS1hY2NvdW50LXMzY3IzdA=="
AFS = {"kind": "azure_file_share", "relative_mount_path": "afs", "account_name": "acct", "share_name": "logs"}
BLOB = {
    "kind": "azure_blob_container",
    "relative_mount_path": "b",
    "account_name": "acct",
    "container_name": "data",
}


def shown(err: BaseException) -> list[str]:
    return [str(err), repr(err), repr(err.args), repr(vars(err))]


CLUSTER_CASES: dict[str, dict[str, Any]] = {
    # the probe: a misspelt kind, the whole dict echoed with its key
    "kind misspelt": {"mounts": [{**AFS, "kind": "azure_file_shares", "account_key": SECRET}]},
    "a mapping, not a list": {"mounts": {**AFS, "account_key": SECRET}},
    "another field invalid": {"mounts": [{**AFS, "account_name": "NOT VALID", "account_key": SECRET}]},
    "key with a newline": {"mounts": [{**AFS, "account_key": SECRET + "\n"}]},
    "key not a string": {"mounts": [{**BLOB, "account_key": [SECRET]}]},
    "blob kind misspelt": {"mounts": [{**BLOB, "kind": "blob", "account_key": SECRET}]},
    "node setup secret not a string": {"node_setup": "true", "node_setup_secrets": {"API_TOKEN": [SECRET]}},
}


@pytest.mark.parametrize("case", sorted(CLUSTER_CASES))
def test_a_cluster_whose_secret_bearing_field_is_invalid_names_the_field_and_masks_the_value(
    ws: Workspace, case: str
) -> None:
    with pytest.raises(ValidationError) as err:
        ws.create_cluster("c", nodes=1, **CLUSTER_CASES[case])
    assert [text for text in shown(err.value) if SECRET in text] == []
    assert err.value.field  # names the field


JOB_CASES: dict[str, dict[str, Any]] = {
    "job mount kind misspelt": {"mounts": [{**AFS, "kind": "afs", "account_key": SECRET}]},
    "job mount key not a string": {"mounts": [{**AFS, "account_key": {"v": SECRET}}]},
    "secret variable not a string": {"secrets": {"API_TOKEN": [SECRET]}},
    "secret variable with a bad name": {"secrets": {"BAD NAME": SECRET}},
}


@pytest.mark.parametrize("case", sorted(JOB_CASES))
def test_a_job_whose_secret_bearing_field_is_invalid_names_the_field_and_masks_the_value(
    ws: Workspace, case: str
) -> None:
    exp = ws.create_experiment("e")
    ws.create_cluster("c", nodes=1)
    with pytest.raises(ValidationError) as err:
        exp.create_job("j", cluster="c", command_line="true", **JOB_CASES[case])
    assert [text for text in shown(err.value) if SECRET in text] == []


def test_the_masked_value_keeps_the_other_fields_readable(ws: Workspace) -> None:
    with pytest.raises(ValidationError) as err:
        mounts: Any = [{**AFS, "kind": "azure_file_shares", "account_key": SECRET}]
        ws.create_cluster("c", nodes=1, mounts=mounts)
    assert err.value.field == "mounts[0]"
    assert err.value.value == {**AFS, "kind": "azure_file_shares", "account_key": "***"}


def test_the_cli_prints_no_key_for_an_invalid_share_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run: Callable[..., int] = main
    code = run(
        ["cluster", "create", "--root", str(tmp_path / "ws"), "-n", "c", "-t", "1",
         "--storage-account-name", "acct", "--storage-account-key", SECRET, "--afs-name", "NOT_VALID!"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code != 0
    assert SECRET not in out + err
    assert "afs" in err.lower() or "share" in err.lower(), err
