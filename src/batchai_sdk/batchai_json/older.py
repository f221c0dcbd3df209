"""Fields of older Batch AI files: what the az CLI of 2018 passed over, and what no longer maps.

People kept the files they wrote for the 2017-09-01-preview and 2018-03-01 APIs, and files saved from
``az batchai job show`` (which carry read-only fields). The az CLI of 2018 read them into the SDK's models,
which drop fields they do not know, so such files worked. Here they work too: a field in one of the
``*_IGNORED`` lists is passed over with one warning naming it (``_Reader.warn_ignored``); a field whose
meaning cannot be kept is refused with ``PREVIEW`` and what to write instead.
"""

from __future__ import annotations

PREVIEW = "a field of the 2017-09-01-preview API"

# The ARM envelope and `az batchai ... show` output around "properties".
TOP_IGNORED = ("id", "name", "type", "location", "tags", "resourceGroup", "apiVersion")

# job.json "properties": 2017-09-01-preview / 2018-03-01 fields and read-only ones.
JOB_PROPERTIES_IGNORED = (
    "location",  # 2017-09-01-preview, 2018-03-01: jobs took their cluster's region
    "experimentName",  # 2018-03-01: the experiment is given with the command (--experiment)
    "toolType",  # read-only: which of the *Settings the job has
    "provisioningState",
    "provisioningStateTransitionTime",
    "executionState",
    "executionStateTransitionTime",
    "executionInfo",
    "creationTime",
    "jobOutputDirectoryPathSegment",
)
JOB_PROPERTIES_REFUSED = {
    "priority": (
        f"{PREVIEW} (an integer from -1000 to 1000); write "
        '"schedulingPriority": "low", "normal" or "high" instead'
    ),
}
# outputDirectories[i]: "type" (model, logs, summary, custom) and "createNew" (always true since 2018-03-01).
OUTPUT_DIRECTORY_IGNORED = ("type", "createNew")

# cluster.json "properties": read-only fields of `az batchai cluster show` output.
CLUSTER_PROPERTIES_IGNORED = (
    "location",
    "provisioningState",
    "provisioningStateTransitionTime",
    "allocationState",
    "allocationStateTransitionTime",
    "creationTime",
    "currentNodeCount",
    "nodeStateCounts",
    "errors",
)
