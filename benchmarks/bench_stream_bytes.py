"""Bytes a stream fetches from the Azure file share while the file it follows grows to 100 MB.

A writer thread appends small pieces (like a job's stdout.txt growing on a node's SMB mount) to a file
in the share's directory; the reader follows it through ``AzureFileShare`` — the real azure-storage-file-
share ``ShareClient`` against the fake Azure Files REST API (tests/azure/fake_files.py, served through
``responses``) — with the loop ``Job.stream`` runs: ``stat(path).size``, then ``read_bytes(path, offset,
size - offset)``. The fake counts the body bytes it served for GETs. Goal: at most 1.1 x the bytes appended.
With ``--throttle-every N`` every Nth request is answered 503 ServerBusy, which the client's retry absorbs.

    python benchmarks/bench_stream_bytes.py                     # 100 MB at 20 MB/s: about 5-10 s
    python benchmarks/bench_stream_bytes.py --mb 20 --append-kb 1 --throttle-every 50
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import responses

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "azure"))

from fake_files import FakeFilesService  # noqa: E402

from batchai_sdk.backends.azure import AzureFileShare  # noqa: E402

GOAL = 1.1
ACCOUNT = "batchaibench"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100, help="final size of the followed file, in MB")
    parser.add_argument("--append-kb", type=float, default=4, help="mean size of one append, in KiB")
    parser.add_argument(
        "--rate", type=float, default=20, help="MB/s the writer appends at (0: as fast as it can)"
    )
    parser.add_argument(
        "--poll", type=float, default=0.01, help="seconds the reader sleeps when nothing is new"
    )
    parser.add_argument(
        "--throttle-every", type=int, default=0, help="answer every Nth request 503 (0: never)"
    )
    args = parser.parse_args()
    total = int(args.mb * 1_000_000)
    mean = max(1, int(args.append_kb * 1024))

    with (
        tempfile.TemporaryDirectory(prefix="bench_stream_") as tmp,
        responses.RequestsMock(assert_all_requests_are_fired=False) as mock,
    ):
        files = FakeFilesService(Path(tmp), ACCOUNT)
        files.register(mock)
        share = AzureFileShare.from_account_key(
            ACCOUNT, "YmVuY2gta2V5", "batchaishare", retry_initial_backoff=0, retry_increment_base=0,
            retry_jitter=0, retry_total=5,
        )  # fmt: skip
        share.create()
        share.write_bytes("job/stdout.txt", b"")
        target = files.share_dir("batchaishare") / "job" / "stdout.txt"
        written = hashlib.sha256()
        appends = 0
        done = threading.Event()

        def writer() -> None:
            nonlocal appends
            rng = random.Random(1)
            size = 0
            begun = time.perf_counter()
            try:
                with target.open("ab") as f:
                    while size < total:
                        if args.rate > 0:
                            ahead = size / (args.rate * 1e6) - (time.perf_counter() - begun)
                            if ahead > 0:
                                time.sleep(ahead)
                        n = min(total - size, rng.randint(1, 2 * mean))
                        piece = (os.urandom(n // 2 + 1).hex().encode() + b"\n")[-n:]
                        f.write(piece)
                        f.flush()
                        written.update(piece)
                        size += n
                        appends += 1
            finally:
                done.set()

        if args.throttle_every:
            calls = {"n": 0}
            handle = files._handle

            def throttling(request):  # type: ignore[no-untyped-def]
                calls["n"] += 1
                if calls["n"] % args.throttle_every == 0:
                    files.throttle_next(1)
                return handle(request)

            files._handle = throttling  # type: ignore[method-assign]
            mock.reset()
            files.register(mock)

        got = hashlib.sha256()
        offset = reads = polls = 0
        started = time.perf_counter()
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        while True:
            finished = done.is_set()  # read before stat: once the writer is done, one last drain
            info = share.stat("job/stdout.txt")
            polls += 1
            size = info.size if info is not None and info.size is not None else 0
            if size > offset:
                chunk = share.read_bytes("job/stdout.txt", offset, size - offset)
                got.update(chunk)
                offset += len(chunk)
                reads += 1
                continue
            if finished:
                break
            time.sleep(args.poll)
        elapsed = time.perf_counter() - started
        thread.join()

    fetched = files.counters.get_bytes
    ratio = fetched / total
    ok = got.digest() == written.digest() and offset == total
    rate = f"at {args.rate:g} MB/s" if args.rate > 0 else "as fast as possible"
    print(f"appended:      {total:,} bytes in {appends:,} appends (mean {mean:,} B), {rate}")
    print(f"fetched:       {fetched:,} bytes by {reads:,} ranged GETs and {polls:,} size checks (HEAD)")
    print(f"ratio:         {ratio:.4f} x the bytes appended (goal <= {GOAL})")
    print(f"content:       {'identical' if ok else 'DIFFERENT'} (sha256 of what was streamed vs appended)")
    print(f"throttled:     {files.counters.throttled} answers 503 ServerBusy, absorbed by the client's retry")
    print(f"time:          {elapsed:.1f} s ({total / elapsed / 1e6:.1f} MB/s through the fake)")
    return 0 if ok and ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
