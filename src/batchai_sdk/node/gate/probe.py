"""The gate's work on one node: run the tools there, read them with ``checks``, and measure all-reduce.

``node_report(node, level, gpus)`` runs with ``python -S`` (standard library only): nvidia-smi where the
node has it or the size has GPUs, DCGM's level-1 diagnostics and the NHC log where they exist
(level ``full``), the versions the job's nodes must agree on. ``allreduce_worker`` is one rank of the
bandwidth test: it imports torch (gloo on CPU, NCCL on GPUs), so it runs with the node's full Python,
as a job's ranks do; a node without torch reports the test skipped, not failed.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from .checks import GPU_QUERY, Check, cuda_version, dcgm_checks, gpu_checks, nhc_checks, parse_gpus

NHC_LOGS = ("/opt/azurehpc/test/azurehpc-health-checks/health.log", "/var/log/nhc.log")
# where NCCL's library is installed: the distribution's, CUDA's, HPC-X's (the Azure HPC image), NCCL_HOME's
NCCL_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/local/cuda/lib64", "/usr/lib64", "/opt/hpcx/nccl/lib")


def nccl_version(dirs: Sequence[str]) -> str | None:
    """NCCL's version from its library's file name (``libnccl.so.2.21.5``): the newest found in ``dirs``."""
    found: list[tuple[int, ...]] = []
    for folder in dirs:
        for path in glob.glob(os.path.join(folder, "libnccl.so.*")):
            parts = os.path.basename(path)[len("libnccl.so.") :].split(".")
            if len(parts) == 3 and all(p.isdigit() for p in parts):
                found.append(tuple(int(p) for p in parts))
    return ".".join(map(str, max(found))) if found else None


def _run(argv: list[str], timeout: float) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, f"{argv[0]}: {exc}"
    return done.returncode, done.stdout if done.returncode == 0 else (done.stderr or done.stdout)


def node_report(node: str, level: str, gpus: int) -> dict[str, Any]:
    """This node's checks and versions, as JSON-able data."""
    out: list[Check] = []
    versions: dict[str, str | None] = {}
    notes: list[str] = []
    smi = shutil.which("nvidia-smi")
    if smi is None:
        if gpus > 0:
            out.append(Check(node, "gpu-count", False, f"nvidia-smi not found, {gpus} GPU(s) expected"))
        else:  # said, not silently left out: a CPU node's report is shorter than a GPU node's
            skipped = "GPU count, ECC, throttling" + (", DCGM diagnostics" if level == "full" else "")
            notes.append(f"no GPUs (none expected, no nvidia-smi): {skipped} checks skipped")
    else:
        code, text = _run([smi, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"], 20)
        if code != 0:
            out.append(Check(node, "nvidia-smi", False, f"exit {code}: {text.strip()[:200]}"))
        else:
            rows = parse_gpus(text)
            out.extend(gpu_checks(node, rows, gpus))
            versions["driver"] = rows[0].get("driver_version") if rows else None
            versions["cuda"] = cuda_version(_run([smi], 20)[1])
            home = os.environ.get("NCCL_HOME")
            versions["nccl"] = nccl_version([*NCCL_DIRS, *([os.path.join(home, "lib")] if home else [])])
    if level == "full" and smi is not None and (dcgmi := shutil.which("dcgmi")) is not None:
        code, text = _run([dcgmi, "diag", "-r", "1", "-j"], 120)
        out.extend(dcgm_checks(node, text) if text.strip().startswith("{") else [])
    for log in NHC_LOGS if level == "full" else ():
        if os.path.exists(log):
            with open(log, encoding="utf-8", errors="replace") as f:
                out.extend(nhc_checks(node, f.read()))
            break
    return {"node": node, "checks": [c.to_dict() for c in out], "versions": versions, "notes": notes}


def allreduce_worker(rank: int, world: int, master: str, port: int, megabytes: float, iters: int) -> int:
    """One rank of the all-reduce test; rank 0 prints ``{"busbw": GB/s, "backend": ...}``."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print(json.dumps({"skipped": "torch is not installed on this node"}), flush=True)
        return 0
    gpu = torch.cuda.is_available()
    backend = "nccl" if gpu else "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://{master}:{port}", rank=rank, world_size=world,
        timeout=__import__("datetime").timedelta(seconds=60),
    )  # fmt: skip
    device = torch.device("cuda", rank % max(1, torch.cuda.device_count())) if gpu else torch.device("cpu")
    tensor = torch.ones(int(megabytes * 1e6 / 4), dtype=torch.float32, device=device)
    for _ in range(2):  # warm up: the first calls set up connections
        dist.all_reduce(tensor)
    times = []
    for _ in range(iters):  # the median: one slow call (a neighbour's burst) does not fail a node
        if gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        if gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    seconds = sorted(times)[len(times) // 2]
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        from .checks import busbw

        measured = busbw(tensor.numel() * 4, seconds, world)
        print(json.dumps({"busbw": measured, "backend": backend}), flush=True)
    return 0


def main(argv: list[str]) -> int:
    """``gate-node NODE LEVEL GPUS`` or ``gate-allreduce RANK WORLD MASTER PORT MB ITERS``."""
    if argv[:1] == ["node"] and len(argv) == 4:
        print(json.dumps(node_report(argv[1], argv[2], int(argv[3]))), flush=True)
        return 0
    if argv[:1] == ["allreduce"] and len(argv) == 7:
        rank, world, master, port, mb, iters = argv[1:]
        return allreduce_worker(int(rank), int(world), master, int(port), float(mb), int(iters))
    sys.stderr.write("usage: gate node NODE LEVEL GPUS | gate allreduce RANK WORLD MASTER PORT MB ITERS\n")
    return 2
