"""Errors about a spec read from a job.json name the JSON path, not the SDK field.

A spec from ``parse_job_json`` can still be refused later (``Job`` resolves its paths on the share, the
backend checks what the cluster offers), by code that speaks in ``JobSpec`` field names. ``json_paths``
turns such a ``ValidationError`` into a ``BatchAIJsonError`` whose ``field`` is where to look in the
file: ``properties.stdOutErrPathPrefix``, not ``std_out_err_path_prefix``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .._models import JobSpec, Toolkit
from ..exceptions import BatchAIJsonError, ValidationError
from .reading import _error

_JSON_KEY = {
    Toolkit.HOROVOD: "horovodSettings",
    Toolkit.CUSTOM_MPI: "customMpiSettings",
    Toolkit.CUSTOM: "customToolkitSettings",
    Toolkit.PYTORCH: "pyTorchSettings",
    Toolkit.TENSORFLOW: "tensorFlowSettings",
    Toolkit.CHAINER: "chainerSettings",
    Toolkit.CNTK: "cntkSettings",
    Toolkit.CAFFE: "caffeSettings",
    Toolkit.CAFFE2: "caffe2Settings",
}
_TOP = {
    "node_count": "properties.nodeCount",
    "std_out_err_path_prefix": "properties.stdOutErrPathPrefix",
    "mount_path": "properties.mountVolumes.azureFileShares[0].relativeMountPath",
    "job_preparation": "properties.jobPreparation.commandLine",
    "container_image": "properties.containerSettings.imageSourceRegistry.image",
    "environment": "properties.environmentVariables",
    "max_wall_clock_seconds": "properties.constraints.maxWallClockTime",
    "scheduling_priority": "properties.schedulingPriority",
    "hang_timeout": "batchaiSdk.hangTimeoutSeconds",
    "max_retries": "batchaiSdk.maxRetries",
    "retry_on_exit_codes": "batchaiSdk.retryOnExitCodes",
}
_TOOLKIT_FIELDS = {
    "python_script": "pythonScriptFilePath",
    "python_interpreter": "pythonInterpreterPath",
    "args": "commandLineArgs",
    "command_line": "commandLine",
    "process_count": "processCount",
}
_SETTINGS = {
    "communication_backend": "communicationBackend",
    "worker_count": "workerCount",
    "parameter_server_count": "parameterServerCount",
    "master_args": "masterCommandLineArgs",
    "worker_args": "workerCommandLineArgs",
    "parameter_server_args": "parameterServerCommandLineArgs",
    "language_type": "languageType",
    "config_file": "configFilePath",
}
_NAMES = ("job name", "experiment name", "cluster name")


def json_path_of(spec: JobSpec | Mapping[str, Any], field: str) -> str:
    """The JSON path in ``spec``'s job.json of the ``JobSpec`` field ``field`` (as ``ValidationError``
    names it: ``output_directories.MODEL``, ``toolkit_settings.config_file``, ``args[2]``). ``spec`` may
    be the keyword arguments of a ``JobSpec`` not yet made."""
    fields = dataclasses.asdict(spec) if isinstance(spec, JobSpec) else spec
    head, _, rest = field.partition(".")
    base = head.split("[")[0]
    toolkit = f"properties.{_JSON_KEY[Toolkit.parse(fields.get('toolkit', Toolkit.HOROVOD))]}"
    if base in _TOOLKIT_FIELDS:
        return f"{toolkit}.{_TOOLKIT_FIELDS[base]}"
    if base == "toolkit_settings":
        return f"{toolkit}.{_SETTINGS.get(rest.split('[')[0], '')}".rstrip(".")
    for kind, key, leaf in (
        ("input_directories", "inputDirectories", "path"),
        ("output_directories", "outputDirectories", "pathPrefix"),
    ):
        if base == kind:
            ids = list(fields.get(kind) or ())
            if rest in ids:
                return f"properties.{key}[{ids.index(rest)}].{leaf}"
            return f"properties.{key}"
    return _TOP.get(base, "properties")


@contextmanager
def json_paths(spec: JobSpec | Mapping[str, Any]) -> Iterator[None]:
    """Inside it, a ``ValidationError`` about ``spec`` becomes a ``BatchAIJsonError`` naming the JSON path
    (the value and what was expected kept). Names given with the command (job, experiment, cluster) and
    errors that already name a JSON path pass through."""
    try:
        yield
    except BatchAIJsonError:
        raise
    except ValidationError as exc:
        if exc.field in _NAMES:
            raise
        where = json_path_of(spec, exc.field)
        shown = "" if exc.value is None else f": {exc.value!r}"
        raise _error(
            where, exc.value, exc.expected, f"invalid {where}{shown}; expected {exc.expected}"
        ) from exc
