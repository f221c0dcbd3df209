"""batchai_sdk: Azure Batch AI's distributed-training workflow, client-side.

>>> from batchai_sdk import Workspace
>>> ws = Workspace.local(root="./.batchai")
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ._health import HealthCheck, HealthReport
from ._models import (
    ClusterSpec,
    ClusterState,
    FileInfo,
    JobSpec,
    JobState,
    JobStatus,
    NodeCounts,
    NodeState,
    Toolkit,
    VmPriority,
)
from .cluster import Cluster
from .exceptions import (
    AlreadyExistsError,
    AzureError,
    AzureQuotaError,
    BackendError,
    BatchAIError,
    BatchAIJsonError,
    CapacityError,
    ClusterBusyError,
    HostKeyError,
    JobFailedError,
    MissingExtraError,
    NodeError,
    NotFoundError,
    NotSupportedError,
    ShareError,
    SlurmCommandNotFoundError,
    SlurmError,
    SlurmRejectedError,
    SSHError,
    TimeoutError,
    UnhealthyNodesError,
    ValidationError,
)
from .experiment import Experiment
from .job import Job
from .share import Share
from .workspace import Workspace

if TYPE_CHECKING:
    from .backends.azure.sweep import TaggedResource

logging.getLogger("batchai_sdk").addHandler(logging.NullHandler())

__version__ = "0.1.0"


def sweep(subscription_id: str | None = None, **kwargs: Any) -> list[TaggedResource]:
    """Every Azure resource batchai_sdk tagged in the subscription, across resource groups and regions:
    group, type, name, location, workspace, cluster, VM size and node count of scale sets, created time.
    Read-only. ``credential=``, ``workspace=``: see ``batchai_sdk.backends.azure.sweep`` (docs/cost.md)."""
    from .backends.azure.sweep import sweep as _sweep

    return _sweep(subscription_id, **kwargs)


__all__ = [
    "AlreadyExistsError",
    "AzureError",
    "AzureQuotaError",
    "BackendError",
    "BatchAIError",
    "BatchAIJsonError",
    "CapacityError",
    "Cluster",
    "ClusterBusyError",
    "ClusterSpec",
    "ClusterState",
    "Experiment",
    "FileInfo",
    "HealthCheck",
    "HealthReport",
    "HostKeyError",
    "Job",
    "JobFailedError",
    "JobSpec",
    "JobState",
    "JobStatus",
    "MissingExtraError",
    "NodeCounts",
    "NodeError",
    "NodeState",
    "NotFoundError",
    "NotSupportedError",
    "SSHError",
    "Share",
    "ShareError",
    "SlurmCommandNotFoundError",
    "SlurmError",
    "SlurmRejectedError",
    "TimeoutError",
    "Toolkit",
    "UnhealthyNodesError",
    "ValidationError",
    "VmPriority",
    "Workspace",
    "__version__",
    "sweep",
]
