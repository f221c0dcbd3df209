"""``JobSpec`` -> the Batch AI 2018-05-01 job.json document (``parse_job_json`` reads it back unchanged)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from .._models import DEFAULT_HANG_NOTICE, JobSpec, Toolkit, default_hang_timeout
from ..exceptions import ValidationError
from .job import _SCRIPT_TOOLKITS, _TF_ARGS, SDK_EXTENSION
from .mounts import _MOUNT_PATH_RE, mount_volumes_json
from .reading import SCHEMA_URL
from .values import format_duration, join_args


def _sdk_extension_json(spec: JobSpec) -> dict[str, Any]:
    """The ``batchaiSdk`` object for ``spec``, holding only what differs from the defaults ({} if nothing)."""
    ext: dict[str, Any] = {}
    if spec.hang_timeout != default_hang_timeout(spec.python_script):
        timeout = spec.hang_timeout or 0.0
        ext["hangTimeoutSeconds"] = int(timeout) if float(timeout).is_integer() else timeout
    if spec.hang_notice != DEFAULT_HANG_NOTICE:
        notice = spec.hang_notice or 0.0
        ext["hangNoticeSeconds"] = int(notice) if float(notice).is_integer() else notice
    if spec.max_retries:
        ext["maxRetries"] = spec.max_retries
    if spec.retry_on_exit_codes:
        ext["retryOnExitCodes"] = list(spec.retry_on_exit_codes)
    if spec.health_check is not None:
        ext["healthCheck"] = spec.health_check
    return {SDK_EXTENSION: ext} if ext else {}


def to_job_json(spec: JobSpec, *, storage_account: str | None = None, redact: bool = False) -> dict[str, Any]:
    """The Batch AI job.json document for ``spec`` (``name``, ``experiment`` and ``cluster`` are not in it).

    Secret variables are written to ``secrets`` with their values, so that
    ``parse_job_json(to_job_json(spec), ...) == spec``; with ``redact=True`` their values are ``"***"``
    (for display and records; such a document no longer round-trips). ``azureFileUrl`` is written only when
    ``storage_account`` is given (parse the result with the same ``storage_account``). Raises ValidationError
    for a spec the schema cannot express (e.g. ``process_count`` on a custom toolkit job).
    """
    props: dict[str, Any] = {"nodeCount": spec.node_count}
    if spec.scheduling_priority != "normal":
        props["schedulingPriority"] = spec.scheduling_priority
    props.update(_toolkit_json(spec))
    if spec.std_out_err_path_prefix is not None:
        props["stdOutErrPathPrefix"] = spec.std_out_err_path_prefix
    if spec.mount_path is not None and not _MOUNT_PATH_RE.fullmatch(spec.mount_path):
        raise ValidationError(
            "mount_path", spec.mount_path, "one directory name (job.json relativeMountPath)"
        )
    if spec.mount_path is not None or spec.mounts:
        props["mountVolumes"] = mount_volumes_json(
            spec.mounts, workspace_share=spec.mount_path, storage_account=storage_account
        )
    if spec.job_preparation is not None:
        props["jobPreparation"] = {"commandLine": spec.job_preparation}
    if spec.container_image is not None:
        props["containerSettings"] = {"imageSourceRegistry": {"image": spec.container_image}}
    plain = [{"name": k, "value": v} for k, v in spec.environment.items() if k not in spec.secret_environment]
    secrets = [
        {"name": k, "value": "***" if redact else spec.environment[k]}
        for k in spec.secret_environment
        if k in spec.environment
    ]
    if plain:
        props["environmentVariables"] = plain
    if secrets:
        props["secrets"] = secrets
    if spec.input_directories:
        props["inputDirectories"] = [{"id": k, "path": v} for k, v in spec.input_directories.items()]
    if spec.output_directories:
        props["outputDirectories"] = [{"id": k, "pathPrefix": v} for k, v in spec.output_directories.items()]
    if spec.max_wall_clock_seconds is not None:
        props["constraints"] = {"maxWallClockTime": format_duration(float(spec.max_wall_clock_seconds))}
    return {"$schema": SCHEMA_URL, "properties": props, **_sdk_extension_json(spec)}


_JSON_KEY = {toolkit: key for key, (toolkit, _) in _SCRIPT_TOOLKITS.items()}


def _toolkit_json(spec: JobSpec) -> dict[str, Any]:
    def refuse(field: str, value: Any, why: str) -> NoReturn:
        raise ValidationError(field, value, why)

    settings = spec.toolkit_settings
    if not spec.toolkit.runs_command_line:
        if spec.command_line is not None:
            refuse("command_line", spec.command_line, f"None for a {spec.toolkit} job in job.json")
        doc: dict[str, Any] = {}
        if spec.python_script is not None:
            doc["pythonScriptFilePath"] = spec.python_script
        if spec.python_interpreter is not None:
            doc["pythonInterpreterPath"] = spec.python_interpreter
        if spec.args:
            doc["commandLineArgs"] = join_args(spec.args)
        if spec.process_count is not None:
            doc["processCount"] = spec.process_count
        if "communication_backend" in settings:
            doc["communicationBackend"] = settings["communication_backend"]
        for name, setting in _TF_ARGS.items():
            if settings.get(setting) is not None:
                doc[name] = join_args(settings[setting])
        if settings.get("worker_count") is not None:
            doc["workerCount"] = settings["worker_count"]
        if settings.get("parameter_server_count") is not None:
            doc["parameterServerCount"] = settings["parameter_server_count"]
        if settings.get("language_type") is not None:
            doc["languageType"] = settings["language_type"]
        if settings.get("config_file") is not None:
            doc["configFilePath"] = settings["config_file"]
        return {_JSON_KEY[spec.toolkit]: doc}
    checks: list[tuple[str, Any, Callable[[Any], bool]]] = [
        ("python_script", spec.python_script, lambda v: v is None),
        ("args", spec.args, lambda v: not v),
        ("python_interpreter", spec.python_interpreter, lambda v: v is None),
    ]
    if spec.toolkit is Toolkit.CUSTOM:
        checks.append(("process_count", spec.process_count, lambda v: v is None))
    for field, value, ok in checks:
        if not ok(value):
            refuse(field, value, f"unset for a {spec.toolkit} job in job.json")
    if spec.toolkit is Toolkit.CUSTOM_MPI:
        mpi: dict[str, Any] = {"commandLine": spec.command_line}
        if spec.process_count is not None:
            mpi["processCount"] = spec.process_count
        return {"customMpiSettings": mpi}
    return {"customToolkitSettings": {"commandLine": spec.command_line}}
