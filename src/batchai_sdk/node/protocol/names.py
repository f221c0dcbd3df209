"""The request vocabulary: the names and values a scheduler request may carry, spelled once.

Job, experiment and cluster names, the socket's operations, Batch AI's scheduling priorities and the
health gate's levels. ``ctl`` starts for every request and checks it before it writes anything; it imports
this module (``re`` only) instead of the modules these values are used in, which load ``dataclasses``
and ``sqlite3`` (about 16 ms of a submit's start-up). Those modules re-export what they use from here.
"""

from __future__ import annotations

import re

# The wire's version: a scheduler answers ``ping`` with it, and a client that speaks another one refuses to
# go on (``ProtocolMismatchError``), as SkyPilot's client compares its SKYLET_VERSION with the head node's.
# Raise it with any change to a request, a reply or a record that an older peer would misread.
PROTOCOL = 1

SCHED_SOCKET = "sched.sock"  # the scheduler's socket in its state folder: one JSON line each way per request

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

# ctl: the request's operations
OP_SUBMIT, OP_TERMINATE, OP_PING, OP_NODES, OP_JOB = "submit", "terminate", "ping", "nodes", "job"
OP_HEALTH = "health"  # the admin's health report (check_nodes): signed and applied by the scheduler
OPS = (OP_SUBMIT, OP_TERMINATE, OP_PING, OP_NODES, OP_JOB, OP_HEALTH)
# ctl's answer to a request without the cluster's configuration when no scheduler answers: only a request
# that carries it can start one (the client sends it again with the configuration)
E_NEEDS_CLUSTER = "needs_cluster"

# Batch AI's schedulingPriority as the queue orders it
PRIORITIES = {"low": -1, "normal": 0, "high": 1}

# the health gate's levels, least to most thorough
LEVELS = ("off", "basic", "full")
