"""Every share path under a root and the file names of the records, spelled once.

The tree under a share root (the client's root is ``""``, a node's is where it mounts the share)::

    .batchai/clusters/<cluster>/{cluster,nodes,size}.json, events.jsonl, events.d/
    .batchai/node/<digest>/batchai_node/
    .batchai/experiments/<exp>/experiment.json
    .batchai/experiments/<exp>/jobs/<job>/{job,status}.json, wd/, run/{launch,result}.json,
                                          run/evicted-<node>.json
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

META = ".batchai"
WORKSPACE_RECORD = "workspace.json"
CLUSTER_RECORD = "cluster.json"
NODES_RECORD = "nodes.json"  # which job holds each node (the scheduler)
SIZE_RECORD = "size.json"  # with autoscale: the nodes up now (the scheduler)
EVENTS_RECORD = "events.jsonl"  # every scaling decision (the scheduler)
HEAD_RECORD = "head.json"  # which node's scheduler holds the cluster now (the scheduler, when it starts)
CLIENT_EVENTS = "events.d"  # a client's scaling decision, one file each
HEALTH_REPORT = "health-check.json"  # in a job's logs: the health gate's report on its nodes, when it asked
HEALTH_DIR = "health"  # the health gate's reports, one file each (the scheduler, check_nodes, any tool)
EXPERIMENT_RECORD = "experiment.json"
JOB_RECORD = "job.json"
STATUS_RECORD = "status.json"
LAUNCH_CONFIG = "launch.json"
RESULT_RECORD = "result.json"  # a launcher's outcome; also in its node-local folder on the head node
EVICTED_PREFIX = "evicted-"
SIMULATED_EVICTION_PREFIX = "simulate-eviction-"

# a launcher's node-local job folder (the scheduler's on the head node; the Batch task's working folder on
# Azure Batch): what it is given before it starts, and the mark it leaves as it goes (with RESULT_RECORD)
ASSIGNMENT_RECORD = "assignment.json"  # the nodes, the launch config's path, the attempt (and its tag)
SECRETS_RECORD = "secrets.json"  # the job's secret variables, 0600; removed once the job ends
PHASE_RECORD = "phase.json"  # the launcher's phase, pid and tag (recovery tells a begun attempt by it)


def eviction_marker(node: str) -> str:
    """The file name a node's eviction notice gets in the job's run folder."""
    return f"{EVICTED_PREFIX}{node}.json"


def simulated_eviction(node: str) -> str:
    """The file name of a simulated eviction (``cluster.simulate_eviction``) in the job's run folder."""
    return f"{SIMULATED_EVICTION_PREFIX}{node}.json"


FAULT_REQUEST_PREFIX = "fault-"  # a fault drill's request for one node (job.inject_fault), in the run folder
LOST_MARKER_PREFIX = "lost-"  # a node a drill took away (lose_node): the attempt ends as a lost node's


def fault_request(node: str) -> str:
    """The file name of a fault drill's request for ``node`` in the job's run folder."""
    return f"{FAULT_REQUEST_PREFIX}{node}.json"


def lost_marker(node: str) -> str:
    """The file name a node a drill took away (``lose_node``) leaves in the job's run folder."""
    return f"{LOST_MARKER_PREFIX}{node}.json"


def is_eviction_file(name: str, *, simulated: bool = False) -> bool:
    prefixes = (EVICTED_PREFIX, SIMULATED_EVICTION_PREFIX) if simulated else (EVICTED_PREFIX,)
    return name.startswith(prefixes) and name.endswith(".json")


@dataclass(frozen=True)
class SharePaths:
    """The share's paths under ``root`` (``""``: share-relative, as the client's Share takes them; on a
    node, where it mounts the share). Names come validated from the caller."""

    root: str = ""

    @classmethod
    def at_meta(cls, meta_root: str) -> SharePaths:
        """The paths of a share whose ``.batchai`` folder is ``meta_root`` (as a node sees it)."""
        return cls(posixpath.dirname(meta_root.rstrip("/")))

    def _p(self, *parts: str) -> str:
        return posixpath.join(self.root, META, *parts) if self.root else posixpath.join(META, *parts)

    def meta(self) -> str:
        return self._p()

    def workspace_record(self) -> str:
        return self._p(WORKSPACE_RECORD)

    def clusters_dir(self) -> str:
        return self._p("clusters")

    def cluster_dir(self, cluster: str) -> str:
        return self._p("clusters", cluster)

    def cluster_record(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), CLUSTER_RECORD)

    def nodes_record(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), NODES_RECORD)

    def size_record(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), SIZE_RECORD)

    def head_record(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), HEAD_RECORD)

    def events_record(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), EVENTS_RECORD)

    def client_events_dir(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), CLIENT_EVENTS)

    def health_dir(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), HEALTH_DIR)

    def node_code_dir(self, digest: str) -> str:
        return self._p("node", digest, "batchai_node")

    def experiments_dir(self) -> str:
        return self._p("experiments")

    def experiment_record(self, experiment: str) -> str:
        return self._p("experiments", experiment, EXPERIMENT_RECORD)

    def jobs_dir(self, experiment: str) -> str:
        return self._p("experiments", experiment, "jobs")

    def job_dir(self, experiment: str, job: str) -> str:
        return posixpath.join(self.jobs_dir(experiment), job)

    def job_record(self, experiment: str, job: str) -> str:
        return posixpath.join(self.job_dir(experiment, job), JOB_RECORD)

    def status_record(self, experiment: str, job: str) -> str:
        return posixpath.join(self.job_dir(experiment, job), STATUS_RECORD)

    def job_wd(self, experiment: str, job: str) -> str:
        return posixpath.join(self.job_dir(experiment, job), "wd")

    def run_dir(self, experiment: str, job: str) -> str:
        return posixpath.join(self.job_dir(experiment, job), "run")

    def launch_config(self, experiment: str, job: str) -> str:
        return posixpath.join(self.run_dir(experiment, job), LAUNCH_CONFIG)

    def result_record(self, experiment: str, job: str) -> str:
        return posixpath.join(self.run_dir(experiment, job), RESULT_RECORD)

    def job_output_root(self, prefix: str | None, experiment: str, job: str) -> str:
        """Where the job's logs and outputs go: under ``prefix`` (share-relative), ``.batchai`` by default."""
        base = posixpath.join(self.root, prefix or META) if self.root else (prefix or META)
        return posixpath.join(base, "experiments", experiment, "jobs", job)
