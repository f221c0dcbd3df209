"""AzureFileShare: the real ShareClient against the fake Azure Files REST API."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from azure_helpers import ACCOUNT, all_messages
from fake_files import MAX_RANGE, FakeFilesService

from batchai_sdk.backends.azure import AzureFileShare
from batchai_sdk.exceptions import NotFoundError, ShareError

KEY = "ZmFrZS1zdG9yYWdlLWFjY291bnQta2V5LXNlY3JldA=="


@pytest.fixture
def share(files: FakeFilesService) -> AzureFileShare:
    s = AzureFileShare.from_account_key(
        ACCOUNT,
        KEY,
        "batchaishare",
        retry_total=3,
        retry_initial_backoff=0,
        retry_increment_base=0,
        retry_jitter=0,
    )
    s.create()
    return s


def test_files_written_through_the_client_are_real_files_others_see(
    share: AzureFileShare, files: FakeFilesService
) -> None:
    share.write_text("exp/job/stdouterr/stdout.txt", "epoch 1\n")
    on_disk = files.share_dir("batchaishare") / "exp/job/stdouterr/stdout.txt"
    assert on_disk.read_text() == "epoch 1\n"
    (on_disk.parent / "stderr.txt").write_text("warning\n")  # a node writes through its mount
    assert [(e.name, e.type, e.size) for e in share.list("exp/job/stdouterr")] == [
        ("stderr.txt", "file", 8),
        ("stdout.txt", "file", 8),
    ]
    assert share.read_text("exp/job/stdouterr/stderr.txt") == "warning\n"
    assert share.stat("exp/job").is_dir and share.stat("exp/job/nothing") is None  # type: ignore[union-attr]
    assert share.list("exp")[0].modified is not None
    assert files.counters.unauthorized == []


def test_upload_goes_in_ranges_of_at_most_4_mib_and_download_matches(
    share: AzureFileShare, files: FakeFilesService, tmp_path: Path
) -> None:
    data = os.urandom(10 * 1024 * 1024 + 123)
    src = tmp_path / "model.h5"
    src.write_bytes(data)
    seen: list[int] = []
    share.upload(src, "outputs/model.h5", progress=seen.append)

    assert files.counters.ranges_put == 3  # 4 + 4 + 2 MiB, each within the service's 4 MiB limit
    assert files.counters.put_range_bytes == len(data)
    assert sum(seen) == len(data)
    got: list[int] = []
    out = share.download("outputs/model.h5", tmp_path / "back.h5", progress=got.append)
    assert out.read_bytes() == data
    assert sum(got) == len(data)


def test_ranged_reads_fetch_only_the_bytes_asked_for(share: AzureFileShare, files: FakeFilesService) -> None:
    target = files.share_dir("batchaishare") / "log.txt"
    target.write_bytes(b"a" * 1000)
    before = files.counters.ranged_get_bytes
    assert share.read_bytes("log.txt", 990, 10) == b"a" * 10
    assert files.counters.ranged_get_bytes - before == 10
    assert share.read_bytes("log.txt", 995) == b"a" * 5  # to the end
    assert share.read_bytes("log.txt", 1000) == b""  # 416 past the end: nothing new
    assert share.read_bytes("log.txt", 5000, 10) == b""
    assert files.counters.ranged_get_bytes - before == 15


def test_an_empty_file_reads_as_empty(share: AzureFileShare) -> None:
    share.write_bytes("empty", b"")
    assert share.read_bytes("empty") == b""
    assert share.size("empty") == 0


def test_throttling_is_retried_by_the_client(share: AzureFileShare, files: FakeFilesService) -> None:
    share.write_text("status.json", '{"state": "running"}')
    files.throttle_next(2)  # 503 ServerBusy twice
    assert share.read_json("status.json") == {"state": "running"}
    assert files.counters.throttled == 2


def test_persistent_errors_become_share_errors_without_the_key(
    share: AzureFileShare, files: FakeFilesService
) -> None:
    share.write_text("x.txt", "x")
    files.throttle_next(10, status=500)
    with pytest.raises(ShareError) as info:
        share.read_bytes("x.txt")
    text = all_messages(info.value)
    assert "ServerBusy" in str(info.value)
    assert KEY not in text and "SharedKey" not in text


def test_missing_paths_raise_not_found_and_deletes_are_idempotent(share: AzureFileShare) -> None:
    with pytest.raises(NotFoundError):
        share.read_bytes("nope.txt")
    with pytest.raises(NotFoundError):
        share.list("no/such/dir")
    share.write_text("a/b/c.txt", "c")
    share.write_text("a/d.txt", "d")
    share.delete("a", recursive=True)
    assert share.stat("a") is None
    share.delete("a", recursive=True)  # already gone


def test_listing_follows_next_marker(share: AzureFileShare, files: FakeFilesService) -> None:
    files.page_size = 3
    for i in range(7):
        share.write_text(f"many/f{i}.txt", str(i))
    assert [e.name for e in share.list("many")] == [f"f{i}.txt" for i in range(7)]
    lists = [
        q for m, p, q in files.counters.requests if m == "GET" and "comp=list" in q and p.endswith("/many")
    ]
    assert len(lists) == 3 and sum("marker=" in q for q in lists) == 2


def test_overwrite_replaces_the_whole_file(share: AzureFileShare) -> None:
    share.write_text("status.json", "x" * 100)
    share.write_text("status.json", "short")
    assert share.read_text("status.json") == "short"


def test_big_download_is_parallel_ranges(
    share: AzureFileShare, files: FakeFilesService, tmp_path: Path
) -> None:
    big = files.share_dir("batchaishare") / "big.bin"
    data = os.urandom(3 * MAX_RANGE + 17)
    big.write_bytes(data)
    share.client._config.max_single_get_size = MAX_RANGE  # first GET one range, then parallel chunks
    share.client._config.max_chunk_get_size = MAX_RANGE
    share.download("big.bin", tmp_path / "big.bin")
    ranged = [q for m, p, q in files.counters.requests if m == "GET" and p.endswith("/big.bin")]
    assert len(ranged) == 4
    assert (tmp_path / "big.bin").read_bytes() == data


def test_following_a_growing_file_fetches_each_byte_once(
    share: AzureFileShare, files: FakeFilesService
) -> None:
    """The loop Job.stream runs (size, then the new range) over a file a node appends to."""
    share.write_bytes("stdout.txt", b"")
    target = files.share_dir("batchaishare") / "stdout.txt"
    offset, seen, appended = 0, b"", b""
    before = files.counters.get_bytes
    for i in range(40):
        piece = f"epoch {i} loss {1 / (i + 1):.4f}\n".encode() * (i % 3 + 1)
        with target.open("ab") as f:
            f.write(piece)
        appended += piece
        size = share.size("stdout.txt")
        chunk = share.read_bytes("stdout.txt", offset, size - offset)
        offset += len(chunk)
        seen += chunk
    assert seen == appended
    assert files.counters.get_bytes - before == len(appended)
