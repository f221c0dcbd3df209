"""Jobs for the health-trust tests (tests/node/scheduler/test_health_reports.py, tests/ssh/test_ssh_trust.py):
FORGER writes forged health reports (failures for every node, a FIFO, 8 MB) into a cluster's ``health/``
folder, as a job on a node can: ``python forge.py FOLDER NODE,NODE``."""

from __future__ import annotations

FORGER = r"""
import json, os, sys, time
folder, nodes = sys.argv[1], sys.argv[2].split(",")
os.makedirs(folder, exist_ok=True)
doc = {"level": "full", "nodes": nodes, "checks": [], "started": time.time() + 3600,
       "unusable": {n: "forged by a job" for n in nodes}}
with open(os.path.join(folder, "99999999999-forged.json"), "w") as f:
    json.dump(doc, f)
os.mkfifo(os.path.join(folder, "99999999999-fifo.json"))
with open(os.path.join(folder, "99999999999-huge.json"), "w") as f:
    f.write('{"level": "basic", "nodes": ["' + nodes[0] + '"], "unusable": {"' + nodes[0] + '": "')
    f.write("x" * (8 << 20))
    f.write('"}}')
print("forged")
"""
