"""Horovod's stall warnings as a witness for the hang verdict (standard library only).

Horovod's stall inspector writes, every ``HOROVOD_STALL_CHECK_TIME_SECONDS`` (60 s by default), which ranks
have not yet submitted each tensor the others wait on::

    One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks ...
    Missing ranks:
    0: [other]
    1: [grad]
    2: [other]

(rank 1 has not submitted ``grad``, which ranks 0 and 2 have; ranks 0 and 2 have not submitted ``other``).
The odd ranks out are those missing from the tensor the most ranks submitted: rank 1 here, which the ranks'
stacks alone (all three in ``allreduce`` on the same line) cannot tell.
"""

from __future__ import annotations

import os
import re

__all__ = ["horovod_missing", "summary"]

_MISSING = re.compile(r"^\s*(\d+): \[([^\]]*)\]\s*$")
_TAIL = 64 * 1024


def horovod_missing(text: str) -> dict[str, list[int]]:
    """Tensor → the ranks that have not submitted it, from the last "Missing ranks:" list in ``text``."""
    at = text.rfind("Missing ranks:")
    if at < 0:
        return {}
    missing: dict[str, list[int]] = {}
    for line in text[at:].splitlines()[1:]:
        match = _MISSING.match(line)
        if not match:
            break
        for name in (n.strip() for n in match.group(2).split(",")):
            if name:
                missing.setdefault(name, []).append(int(match.group(1)))
    return missing


def summary(stdouterr: str) -> tuple[str, list[int]]:
    """One clause from the last stall warning in the job's ``stderr.txt`` (``Horovod: grad waits for rank
    1; other for ranks 0, 2``) and the ranks it blames ([] where none stands out); ("", []) without one."""
    try:
        with open(os.path.join(stdouterr, "stderr.txt"), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - _TAIL))
            text = f.read().decode(errors="replace")
    except OSError:
        return "", []
    missing = horovod_missing(text)
    if not missing:
        return "", []
    parts = []
    for name, ranks in missing.items():
        who = ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)
        parts.append(f"{name} waits for {who}")
    fewest = min(len(r) for r in missing.values())
    blamed = [ranks for ranks in missing.values() if len(ranks) == fewest]
    odd = sorted(blamed[0]) if len(blamed) == 1 else []
    return "Horovod: " + "; ".join(parts), odd
