"""batchai_sdk: Azure Batch AI's distributed-training workflow, client-side."""

from __future__ import annotations

from ._models import ClusterState, FileInfo, JobSpec, JobState, NodeCounts, VmPriority
from .exceptions import BatchAIError

__version__ = "0.1.0"

__all__ = ["BatchAIError", "ClusterState", "FileInfo", "JobSpec", "JobState", "NodeCounts", "VmPriority"]
