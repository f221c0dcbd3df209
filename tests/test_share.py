from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from batchai_sdk import NotFoundError, ValidationError
from batchai_sdk.share import LocalShare, normalize


@pytest.fixture
def share(tmp_path: Path) -> LocalShare:
    return LocalShare(tmp_path / "share", name="myshare")


@pytest.mark.parametrize("bad", ["/etc/passwd", "..", "../x", "a/../../x"])
def test_paths_cannot_escape_the_share(share: LocalShare, bad: str) -> None:
    with pytest.raises(ValidationError) as err:
        share.read_bytes(bad)
    assert err.value.field == "path"


def test_normalize() -> None:
    assert normalize("a//b/./c/") == "a/b/c"
    assert normalize("") == normalize(".") == ""
    assert normalize("a/../b") == "b"


def test_upload_list_download_a_directory(share: LocalShare, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha")
    (src / "sub" / "b.bin").write_bytes(b"\x00" * 10)
    moved: list[int] = []
    share.upload(src, "cifar/code", progress=moved.append)
    assert sum(moved) == 15
    listing = share.list("cifar/code")
    assert [(f.name, f.type, f.size) for f in listing] == [("a.txt", "file", 5), ("sub", "directory", None)]
    assert all(f.modified is not None for f in listing)
    out = share.download("cifar/code", tmp_path / "back")
    assert (out / "sub" / "b.bin").read_bytes() == b"\x00" * 10
    assert (out / "a.txt").read_text() == "alpha"


def test_download_into_an_existing_directory_keeps_the_name(share: LocalShare, tmp_path: Path) -> None:
    share.write_text("cifar/model.h5", "weights")
    dest = share.download("cifar/model.h5", tmp_path)
    assert dest == tmp_path / "model.h5"
    assert dest.read_text() == "weights"
    assert not list(tmp_path.glob("*.part"))


def test_missing_files_raise_not_found(share: LocalShare, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError) as err:
        share.download("nope.txt", tmp_path)
    assert err.value.name == "nope.txt"
    with pytest.raises(NotFoundError):
        share.list("no/dir")
    with pytest.raises(NotFoundError):
        share.upload(tmp_path / "missing.py", "x.py")


def test_ranged_reads(share: LocalShare) -> None:
    share.write_bytes("log.txt", b"0123456789")
    assert share.read_bytes("log.txt", 3, 4) == b"3456"
    assert share.read_bytes("log.txt", 8, 100) == b"89"
    assert share.read_bytes("log.txt", 20, 5) == b""
    assert share.size("log.txt") == 10


def test_delete_is_idempotent(share: LocalShare) -> None:
    share.write_text("d/x.txt", "x")
    share.delete("d", recursive=True)
    share.delete("d", recursive=True)
    share.delete("never-was.txt")
    assert not share.exists("d")


def test_restrict_makes_a_file_private(share: LocalShare) -> None:
    share.write_text("run/secrets.json", "{}")
    share.restrict("run/secrets.json")
    mode = stat.S_IMODE(os.stat(share.local_path("run/secrets.json")).st_mode)
    assert mode == 0o600


def test_private_files_are_never_readable_by_others(share: LocalShare) -> None:
    share.write_private("run/secrets.json", b'{"TOKEN": "x"}')
    assert stat.S_IMODE(os.stat(share.local_path("run/secrets.json")).st_mode) == 0o600
    assert not list(share.local_path("run").glob("*.tmp"))


def test_downloads_get_the_usual_file_mode(share: LocalShare, tmp_path: Path) -> None:
    share.write_text("model.h5", "w")
    mask = os.umask(0o022)
    try:
        dest = share.download("model.h5", tmp_path / "model.h5")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
