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
    PendingReason,
    Toolkit,
    VmPriority,
)
from .cluster import Cluster
from .cost import Cost
from .exceptions import (
    AlreadyExistsError,
    AzureError,
    AzureQuotaError,
    BackendError,
    BatchAIError,
    BatchAIJsonError,
    BatchAIJsonWarning,
    CapacityError,
    ClusterBusyError,
    FaultInjectionRefusedError,
    HostKeyError,
    JobFailedError,
    MissingExtraError,
    NodeError,
    NotFoundError,
    NotSupportedError,
    ProtocolMismatchError,
    ShareError,
    SlurmCommandNotFoundError,
    SlurmError,
    SlurmRejectedError,
    SSHAuthenticationError,
    SSHError,
    SweepDrivenError,
    TimeoutError,
    UnhealthyNodesError,
    ValidationError,
)
from .experiment import Experiment, RerunChangedWarning
from .job import Job
from .mounts import AzureBlobContainer, AzureFileShare, FileServer, Mount, UnmanagedFileSystem
from .share import Share
from .tracking import log_metric, log_params
from .tuning import EarlyStop, Sweep
from .workspace import Workspace

if TYPE_CHECKING:
    from .backends.azure.sweep import TaggedResource

logging.getLogger("batchai_sdk").addHandler(logging.NullHandler())

__version__ = "0.1.0"


def list_tagged_resources(subscription_id: str | None = None, **kwargs: Any) -> list[TaggedResource]:
    """Every Azure resource batchai_sdk tagged in the subscription, across resource groups and regions:
    group, type, name, location, workspace, cluster, VM size and node count of scale sets, created time.
    Read-only. ``credential=``, ``workspace=``: see ``batchai_sdk.backends.azure.sweep`` (docs/cost.md)."""
    from .backends.azure.sweep import sweep as _sweep

    return _sweep(subscription_id, **kwargs)


def sweep(subscription_id: str | None = None, **kwargs: Any) -> list[TaggedResource]:
    """Deprecated name of ``list_tagged_resources`` (a "sweep" is a hyperparameter sweep now:
    ``Experiment.sweep``)."""
    import warnings

    warnings.warn(
        "batchai_sdk.sweep() lists tagged Azure resources and is renamed list_tagged_resources(); "
        "hyperparameter sweeps are Experiment.sweep(...)",
        DeprecationWarning,
        stacklevel=2,
    )
    return list_tagged_resources(subscription_id, **kwargs)


__all__ = [
    "AlreadyExistsError",
    "AzureBlobContainer",
    "AzureError",
    "AzureFileShare",
    "AzureQuotaError",
    "BackendError",
    "BatchAIError",
    "BatchAIJsonError",
    "BatchAIJsonWarning",
    "CapacityError",
    "Cluster",
    "ClusterBusyError",
    "ClusterSpec",
    "ClusterState",
    "Cost",
    "EarlyStop",
    "Experiment",
    "FaultInjectionRefusedError",
    "FileInfo",
    "FileServer",
    "HealthCheck",
    "HealthReport",
    "HostKeyError",
    "Job",
    "JobFailedError",
    "JobSpec",
    "JobState",
    "JobStatus",
    "MissingExtraError",
    "Mount",
    "NodeCounts",
    "NodeError",
    "NodeState",
    "NotFoundError",
    "NotSupportedError",
    "PendingReason",
    "ProtocolMismatchError",
    "RerunChangedWarning",
    "SSHAuthenticationError",
    "SSHError",
    "Share",
    "ShareError",
    "SlurmCommandNotFoundError",
    "SlurmError",
    "SlurmRejectedError",
    "Sweep",
    "SweepDrivenError",
    "TimeoutError",
    "Toolkit",
    "UnhealthyNodesError",
    "UnmanagedFileSystem",
    "ValidationError",
    "VmPriority",
    "Workspace",
    "__version__",
    "list_tagged_resources",
    "log_metric",
    "log_params",
    "sweep",
]
