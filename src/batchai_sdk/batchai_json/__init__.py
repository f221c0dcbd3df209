"""The Batch AI 2018-05-01 job.json schema <-> ``JobSpec``.

``parse_job_json`` reads the file people wrote for ``az batchai job create --config-file``;
``to_job_json`` writes a spec back in that shape, and ``parse_job_json(to_job_json(spec)) == spec``
for every spec the parser produces. Anything malformed, unknown or not supported raises
``BatchAIJsonError`` whose ``field`` is the JSON path (``properties.horovodSettings.processCount``).

Choices where the schema and this SDK differ:

* ``mountVolumes``: the ``azureFileShares`` entry naming the workspace's own share (``parse_job_json``'s
  ``workspace_share=``; without it, the first entry) is the workspace share, seen at its
  ``relativeMountPath`` under ``$AZ_BATCHAI_JOB_MOUNT_ROOT`` (its ``azureFileUrl``, optional here, and
  ``credentials`` are checked and dropped: the workspace mounts its own share); every other entry of the four
  kinds is a typed mount of its own (``mounts.py`` here, ``batchai_sdk.mounts``, docs/storage.md).
* ``<AZURE_BATCHAI_STORAGE_ACCOUNT>`` / ``<AZURE_BATCHAI_STORAGE_KEY>`` are filled in every string, as the
  az CLI did. The key may only appear where it stays secret: ``credentials.accountKey``, ``secrets[].value``
  and ``environmentVariables[].value`` (such a variable becomes a secret one) — anywhere else it would be
  written to job records.
* ``secrets`` become environment variables whose names are in ``JobSpec.secret_environment``: their values
  reach the job but never a record or a log. ``to_job_json`` writes them back with their values (so the
  round trip holds); pass ``redact=True`` for anything shown or stored (values become ``"***"``).
  Key Vault references (``valueSecretReference``) cannot be resolved client-side and are refused.
* ``containerSettings.imageSourceRegistry.image`` is kept; ``serverUrl``, ``credentials`` and ``shmSize``
  are checked and dropped.
* ``nodeCount`` defaults to 1 and ``stdOutErrPathPrefix`` is optional (the schema requires both).
* An extension, beside ``properties``: ``"batchaiSdk": {"hangTimeoutSeconds": 600, "maxRetries": 2,
  "retryOnExitCodes": [75], "hangNoticeSeconds": 300, "healthCheck": "basic"}`` sets ``JobSpec.hang_timeout``
  (0 turns the watchdog off), ``max_retries``, ``hang_notice``, ``health_check`` and
  ``retry_on_exit_codes``. ``to_job_json`` writes it only when one of them differs from its default, so
  documents without it stay exactly the Batch AI schema.
"""

from __future__ import annotations

from .cluster import CLUSTER_SCHEMA_URL, ClusterJson, parse_cluster_json
from .job import SDK_EXTENSION, json_field_error, parse_job_json
from .mounts import mount_volumes_json
from .reading import ACCOUNT_PLACEHOLDER, KEY_PLACEHOLDER, SCHEMA_URL
from .values import format_duration, join_args, parse_duration
from .write import to_job_json

__all__ = [
    "ACCOUNT_PLACEHOLDER",
    "CLUSTER_SCHEMA_URL",
    "KEY_PLACEHOLDER",
    "SCHEMA_URL",
    "SDK_EXTENSION",
    "ClusterJson",
    "format_duration",
    "join_args",
    "json_field_error",
    "mount_volumes_json",
    "parse_cluster_json",
    "parse_duration",
    "parse_job_json",
    "to_job_json",
]
