"""The Batch AI 2018-05-01 job.json -> ``JobSpec``: the document, toolkits, environment, directories."""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from .._models import CNTK_LANGUAGES, OUTPUT_ID_RE, TORCH_BACKENDS, JobSpec, Toolkit
from ..exceptions import BatchAIJsonError, ValidationError
from ..mounts import AzureFileShare
from ..node.policy.queue import PRIORITIES
from ..node.protocol.names import LEVELS
from .mounts import _parse_mount_volumes
from .older import JOB_PROPERTIES_IGNORED, JOB_PROPERTIES_REFUSED, OUTPUT_DIRECTORY_IGNORED, TOP_IGNORED
from .reading import _error, _invalid, _join, _load, _missing, _Reader
from .values import parse_duration

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_TOOLKITS = (
    "horovodSettings",
    "customMpiSettings",
    "customToolkitSettings",
    "pyTorchSettings",
    "tensorFlowSettings",
    "chainerSettings",
    "cntkSettings",
    "caffeSettings",
    "caffe2Settings",
)
_PROPERTIES_KNOWN = (
    "cluster",
    "schedulingPriority",
    "nodeCount",
    *_TOOLKITS,
    "stdOutErrPathPrefix",
    "mountVolumes",
    "jobPreparation",
    "containerSettings",
    "environmentVariables",
    "secrets",
    "inputDirectories",
    "outputDirectories",
    "constraints",
)


def parse_job_json(
    source: str | os.PathLike[str] | Mapping[str, Any],
    *,
    name: str,
    experiment: str,
    cluster: str,
    storage_account: str | None = None,
    storage_key: str | None = None,
    workspace_share: Callable[[AzureFileShare], bool] | None = None,
) -> JobSpec:
    """The ``JobSpec`` a Batch AI 2018-05-01 job.json describes.

    ``source`` is the path (str or PathLike) of a job.json file, the document's text (a str starting with
    ``{``) or the parsed document. ``name``, ``experiment`` and ``cluster`` are what
    ``az batchai job create`` took as flags. ``storage_account`` /
    ``storage_key`` fill the ``<AZURE_BATCHAI_STORAGE_ACCOUNT>`` / ``<AZURE_BATCHAI_STORAGE_KEY>``
    placeholders. ``workspace_share`` tells whether an ``azureFileShares`` entry names the workspace's own
    share (the first it accepts is seen at ``mount_path``; the others are mounts); without it the first
    entry is the workspace share. Raises ``BatchAIJsonError`` (its ``field`` is the JSON path) for anything
    malformed, unknown or not supported, NotFoundError when the file does not exist.
    """
    document, where = _load(source)
    reader = _Reader(storage_account, storage_key)
    fields = _parse_document(reader, document, cluster, workspace_share)
    reader.warn_ignored(where)
    try:
        return JobSpec(name=name, experiment=experiment, cluster=cluster, **fields)
    except BatchAIJsonError:
        raise
    except ValidationError as exc:
        # The checks above cover every JobSpec rule; this keeps the promise if JobSpec gains one.
        if exc.field in ("job name", "experiment name", "cluster name"):
            raise
        raise json_field_error(exc) from exc


def json_field_error(exc: ValidationError) -> BatchAIJsonError:
    """``exc`` (about a ``JobSpec`` field, raised while parsing or at ``job create``) re-addressed to the
    job.json path it came from: a job.json's author reads ``properties.stdOutErrPathPrefix``, not
    ``std_out_err_path_prefix``."""
    if isinstance(exc, BatchAIJsonError):
        return exc
    head = exc.field.split(".")[0].split("[")[0]
    where = _SPEC_FIELD_PATHS.get(head, "properties")
    if head in ("input_directories", "output_directories") and "." in exc.field:
        where = f"{where}[id={exc.field.split('.', 1)[1]}]"
    shown = f" {exc.value}" if isinstance(exc.value, str) and head != "environment" else ""
    return _error(where, exc.value, exc.expected, f"invalid {where}:{shown}; expected {exc.expected}")


_SPEC_FIELD_PATHS = {
    "node_count": "properties.nodeCount",
    "scheduling_priority": "properties.schedulingPriority",
    "python_script": "properties.horovodSettings.pythonScriptFilePath",
    "args": "properties.horovodSettings.commandLineArgs",
    "command_line": "properties",
    "process_count": "properties",
    "environment": "properties.environmentVariables",
    "input_directories": "properties.inputDirectories",
    "output_directories": "properties.outputDirectories",
    "std_out_err_path_prefix": "properties.stdOutErrPathPrefix",
    "mount_path": "properties.mountVolumes.azureFileShares[0].relativeMountPath",
    "mounts": "properties.mountVolumes",
    "max_wall_clock_seconds": "properties.constraints.maxWallClockTime",
    "hang_timeout": "batchaiSdk.hangTimeoutSeconds",
    "max_retries": "batchaiSdk.maxRetries",
    "retry_on_exit_codes": "batchaiSdk.retryOnExitCodes",
    "hang_notice": "batchaiSdk.hangNoticeSeconds",
    "health_check": "batchaiSdk.healthCheck",
}


def _parse_document(
    r: _Reader,
    document: Any,
    cluster: str,
    workspace_share: Callable[[AzureFileShare], bool] | None = None,
) -> dict[str, Any]:
    top = r.obj(document, "", ("$schema", "properties", SDK_EXTENSION), ignored=TOP_IGNORED)
    if "$schema" in top:
        r.string(top["$schema"], "$schema")
    if "properties" not in top:
        _missing("properties", "an object with the job's settings (nodeCount, horovodSettings, ...)")
    props = r.obj(
        top["properties"], "properties", _PROPERTIES_KNOWN, JOB_PROPERTIES_REFUSED, JOB_PROPERTIES_IGNORED
    )

    fields: dict[str, Any] = {}
    if "cluster" in props:
        _check_cluster(r, props["cluster"], "properties.cluster", cluster)
    if "schedulingPriority" in props:
        where = "properties.schedulingPriority"
        priority = r.string(props["schedulingPriority"], where)
        if priority.lower() not in PRIORITIES:
            _invalid(where, r.shown(priority), "'low', 'normal' or 'high'")
        fields["scheduling_priority"] = priority.lower()
    if "nodeCount" in props:
        fields["node_count"] = r.integer(props["nodeCount"], "properties.nodeCount")
    fields.update(_parse_toolkit(r, props))
    if "stdOutErrPathPrefix" in props:
        fields["std_out_err_path_prefix"] = r.string(
            props["stdOutErrPathPrefix"], "properties.stdOutErrPathPrefix"
        )
    if "mountVolumes" in props:
        fields.update(
            _parse_mount_volumes(r, props["mountVolumes"], "properties.mountVolumes", workspace_share)
        )
    if "jobPreparation" in props:
        prep = r.obj(props["jobPreparation"], "properties.jobPreparation", ("commandLine",))
        if "commandLine" not in prep:
            _missing("properties.jobPreparation.commandLine", "the command line to run on each node first")
        fields["job_preparation"] = r.string(prep["commandLine"], "properties.jobPreparation.commandLine")
    if "containerSettings" in props:
        fields["container_image"] = _parse_container(
            r, props["containerSettings"], "properties.containerSettings"
        )
    environment, secret_names = _parse_environment(r, props)
    fields["environment"] = environment
    fields["secret_environment"] = secret_names
    if "inputDirectories" in props:
        fields["input_directories"] = _parse_directories(
            r, props["inputDirectories"], "properties.inputDirectories", output=False
        )
    if "outputDirectories" in props:
        fields["output_directories"] = _parse_directories(
            r, props["outputDirectories"], "properties.outputDirectories", output=True
        )
    if "constraints" in props:
        constraints = r.obj(props["constraints"], "properties.constraints", ("maxWallClockTime",))
        if "maxWallClockTime" in constraints:
            path = "properties.constraints.maxWallClockTime"
            text = r.string(constraints["maxWallClockTime"], path)
            try:
                fields["max_wall_clock_seconds"] = parse_duration(text)
            except ValueError:
                _invalid(
                    path,
                    r.shown(text),
                    "a positive duration: ISO 8601 like 'PT1H30M' or 'P7D', or a TimeSpan like '1.00:00:00'",
                )
    fields.update(_parse_sdk_extension(r, top))
    return fields


_CLUSTER_ID_RE = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.BatchAI/"
    r"(?:workspaces/[^/]+/)?clusters/([^/]+)/?$",
    re.IGNORECASE,
)


def _check_cluster(r: _Reader, value: Any, path: str, cluster: str) -> None:
    """``cluster``: the resource id (a string, or 2017-09-01-preview's ``{"id": ...}``) of the cluster the
    job is created on; it must name that cluster, as Batch AI refused a job whose id named another."""
    if isinstance(value, Mapping):
        ref = r.obj(value, path, ("id",))
        if "id" not in ref:
            _missing(_join(path, "id"), "the cluster's resource id")
        path, value = _join(path, "id"), ref["id"]
    text = r.string(value, path)
    match = _CLUSTER_ID_RE.fullmatch(text)
    if match is None:
        _invalid(
            path,
            r.shown(text),
            "a cluster resource id: /subscriptions/<id>/resourceGroups/<group>/providers/"
            "Microsoft.BatchAI/workspaces/<workspace>/clusters/<cluster>",
        )
    if match.group(1) != cluster:
        _invalid(path, r.shown(text), f"the id of cluster {cluster!r}, the cluster the job is created on")


# --------------------------------------------------------------------------------------------------
# the batchaiSdk extension: hang watchdog and retries (docs/survive.md)

SDK_EXTENSION = "batchaiSdk"
_SDK_KEYS = ("hangTimeoutSeconds", "hangNoticeSeconds", "maxRetries", "retryOnExitCodes", "healthCheck")


def _parse_sdk_extension(r: _Reader, top: Mapping[str, Any]) -> dict[str, Any]:
    """``hang_timeout``, ``hang_notice``, ``max_retries``, ``retry_on_exit_codes`` and ``health_check`` from
    the top-level ``batchaiSdk`` object."""
    if SDK_EXTENSION not in top:
        return {}
    ext = r.obj(top[SDK_EXTENSION], SDK_EXTENSION, _SDK_KEYS)
    fields: dict[str, Any] = {}
    for key, name, off in (
        ("hangTimeoutSeconds", "hang_timeout", "0 for no watchdog"),
        ("hangNoticeSeconds", "hang_notice", "0 for no notice"),
    ):
        if key in ext:
            value = ext[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                _invalid(f"{SDK_EXTENSION}.{key}", value, f"a number of seconds > 0, or {off}")
            fields[name] = float(value)
    if "healthCheck" in ext:
        level = r.string(ext["healthCheck"], f"{SDK_EXTENSION}.healthCheck")
        if level not in LEVELS:
            _invalid(f"{SDK_EXTENSION}.healthCheck", level, f"one of {', '.join(LEVELS)}")
        fields["health_check"] = level
    if "maxRetries" in ext:
        value = ext["maxRetries"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            _invalid(f"{SDK_EXTENSION}.maxRetries", value, "an integer >= 0")
        fields["max_retries"] = value
    if "retryOnExitCodes" in ext:
        path = f"{SDK_EXTENSION}.retryOnExitCodes"
        codes = r.array(ext["retryOnExitCodes"], path)
        for i, code in enumerate(codes):
            if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= 255:
                _invalid(f"{path}[{i}]", code, "an exit code 1..255")
        fields["retry_on_exit_codes"] = tuple(codes)
    return fields


# The script toolkits: job.json key -> (toolkit, its fields beyond the common ones)
_SCRIPT_TOOLKITS: dict[str, tuple[Toolkit, tuple[str, ...]]] = {
    "horovodSettings": (Toolkit.HOROVOD, ("commandLineArgs", "processCount")),
    "pyTorchSettings": (Toolkit.PYTORCH, ("commandLineArgs", "processCount", "communicationBackend")),
    "chainerSettings": (Toolkit.CHAINER, ("commandLineArgs", "processCount")),
    "caffe2Settings": (Toolkit.CAFFE2, ("commandLineArgs",)),
    "tensorFlowSettings": (
        Toolkit.TENSORFLOW,
        (
            "masterCommandLineArgs",
            "workerCommandLineArgs",
            "parameterServerCommandLineArgs",
            "workerCount",
            "parameterServerCount",
        ),
    ),
    "cntkSettings": (Toolkit.CNTK, ("commandLineArgs", "processCount", "languageType", "configFilePath")),
    "caffeSettings": (Toolkit.CAFFE, ("commandLineArgs", "processCount", "configFilePath")),
}
_TF_ARGS = {
    "masterCommandLineArgs": "master_args",
    "workerCommandLineArgs": "worker_args",
    "parameterServerCommandLineArgs": "parameter_server_args",
}
_SCRIPT = "the path of the Python script to run"


def _parse_toolkit(r: _Reader, props: Mapping[str, Any]) -> dict[str, Any]:
    present = [k for k in _TOOLKITS if k in props]
    if len(present) != 1:
        expected = f"exactly one of {', '.join(_TOOLKITS)}"
        if present:
            raise _error(
                "properties", None, expected, f"properties has {', '.join(present)}; expected {expected}"
            )
        _missing("properties.horovodSettings", expected)
    key = present[0]
    path = f"properties.{key}"
    if key in _SCRIPT_TOOLKITS:
        return _parse_script_toolkit(r, key, props[key], path)
    if key == "customMpiSettings":
        mpi = r.obj(props[key], path, ("commandLine", "processCount"))
        if "commandLine" not in mpi:
            _missing(f"{path}.commandLine", "the command line mpirun starts on each node")
        fields: dict[str, Any] = {
            "toolkit": Toolkit.CUSTOM_MPI,
            "command_line": r.string(mpi["commandLine"], f"{path}.commandLine"),
        }
        if "processCount" in mpi:
            fields["process_count"] = r.integer(mpi["processCount"], f"{path}.processCount")
        return fields
    custom = r.obj(props[key], path, ("commandLine",))
    if "commandLine" not in custom:
        _missing(f"{path}.commandLine", "the command line to run on the head node")
    return {"toolkit": Toolkit.CUSTOM, "command_line": r.string(custom["commandLine"], f"{path}.commandLine")}


def _parse_script_toolkit(r: _Reader, key: str, value: Any, path: str) -> dict[str, Any]:
    toolkit, own = _SCRIPT_TOOLKITS[key]
    doc = r.obj(value, path, ("pythonScriptFilePath", "pythonInterpreterPath", *own))
    fields: dict[str, Any] = {"toolkit": toolkit}
    settings: dict[str, Any] = {}
    if "pythonScriptFilePath" in doc:
        fields["python_script"] = r.string(doc["pythonScriptFilePath"], f"{path}.pythonScriptFilePath")
    if "pythonInterpreterPath" in doc:
        fields["python_interpreter"] = r.string(doc["pythonInterpreterPath"], f"{path}.pythonInterpreterPath")
    if "commandLineArgs" in doc:
        fields["args"] = _split_args(r, doc["commandLineArgs"], f"{path}.commandLineArgs")
    if "processCount" in doc:
        fields["process_count"] = r.integer(doc["processCount"], f"{path}.processCount")
    if "communicationBackend" in doc:
        where = f"{path}.communicationBackend"
        backend = r.string(doc["communicationBackend"], where)
        if backend.lower() not in TORCH_BACKENDS:
            _invalid(where, r.shown(backend), "one of TCP, Gloo, NCCL, MPI (any case)")
        settings["communication_backend"] = backend
    for name, setting in _TF_ARGS.items():
        if name in doc:
            settings[setting] = list(_split_args(r, doc[name], f"{path}.{name}"))
    if "workerCount" in doc:
        settings["worker_count"] = r.integer(doc["workerCount"], f"{path}.workerCount")
    if "parameterServerCount" in doc:
        where = f"{path}.parameterServerCount"
        count = doc["parameterServerCount"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            _invalid(where, count, "an integer >= 0")
        settings["parameter_server_count"] = count
    if "languageType" in doc:
        where = f"{path}.languageType"
        language = r.string(doc["languageType"], where)
        canonical = {name.lower(): name for name in CNTK_LANGUAGES}.get(language.lower())
        if canonical is None:
            _invalid(where, r.shown(language), "'Python' or 'BrainScript'")
        settings["language_type"] = canonical
    if "configFilePath" in doc:
        settings["config_file"] = r.string(doc["configFilePath"], f"{path}.configFilePath")
    if (
        toolkit is Toolkit.CNTK
        and "config_file" in settings
        and not ({"languageType", "pythonScriptFilePath"} & set(doc))
    ):
        settings["language_type"] = "BrainScript"  # as Batch AI inferred from configFilePath
    # which of script and config file each toolkit needs
    script, config = "python_script" in fields, "config_file" in settings
    if toolkit is Toolkit.CAFFE:
        if script == config:
            expected = "exactly one of configFilePath (caffe train) and pythonScriptFilePath (pycaffe)"
            if script:
                raise _error(path, None, expected, f"{path} has both; expected {expected}")
            _missing(f"{path}.configFilePath", expected)
    elif toolkit is Toolkit.CNTK and settings.get("language_type") == "BrainScript":
        if not config:
            _missing(f"{path}.configFilePath", "the BrainScript config file (languageType BrainScript)")
        if script:
            where = f"{path}.pythonScriptFilePath"
            expected = "no Python script with languageType BrainScript (configFilePath runs instead)"
            raise _error(where, None, expected, f"{where} is given; expected {expected}")
    else:
        if not script:
            _missing(f"{path}.pythonScriptFilePath", _SCRIPT)
        if config:
            where = f"{path}.configFilePath"
            expected = "no config file with languageType Python (the script runs instead)"
            raise _error(where, None, expected, f"{where} is given; expected {expected}")
    if settings:
        fields["toolkit_settings"] = settings
    return fields


def _split_args(r: _Reader, value: Any, path: str) -> tuple[str, ...]:
    text = r.string(value, path, nonempty=False)
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:  # unbalanced quotes, a trailing backslash
        _invalid(path, r.shown(text), f"arguments a shell can split ({exc})")


def _parse_container(r: _Reader, value: Any, path: str) -> str:
    settings = r.obj(value, path, ("imageSourceRegistry", "shmSize"))
    if "shmSize" in settings:
        r.string(settings["shmSize"], f"{path}.shmSize")
    rpath = f"{path}.imageSourceRegistry"
    if "imageSourceRegistry" not in settings:
        _missing(rpath, "an object with the image to run in")
    registry = r.obj(settings["imageSourceRegistry"], rpath, ("image", "serverUrl", "credentials"))
    if "image" not in registry:
        _missing(f"{rpath}.image", "a container image such as 'tensorflow/tensorflow:1.8.0-gpu'")
    image = r.string(registry["image"], f"{rpath}.image")
    if any(c.isspace() for c in image):
        _invalid(f"{rpath}.image", r.shown(image), "an image name without spaces")
    if "serverUrl" in registry:
        r.string(registry["serverUrl"], f"{rpath}.serverUrl")
    if "credentials" in registry:
        cpath = f"{rpath}.credentials"
        creds = r.obj(registry["credentials"], cpath, ("username", "password", "passwordSecretReference"))
        if "username" not in creds:
            _missing(f"{cpath}.username", "the registry user name")
        r.string(creds["username"], f"{cpath}.username")
        if "password" in creds:
            r.string(creds["password"], f"{cpath}.password", secret=True, key_allowed=True)
        if "passwordSecretReference" in creds:
            r.key_vault_ref(creds["passwordSecretReference"], f"{cpath}.passwordSecretReference")
    return image


def _parse_environment(r: _Reader, props: Mapping[str, Any]) -> tuple[dict[str, str], tuple[str, ...]]:
    environment: dict[str, str] = {}
    secret_names: list[str] = []
    keyed: list[str] = []  # plain variables that received the storage key: secret as well

    def name_of(item: Mapping[str, Any], ipath: str) -> str:
        if "name" not in item:
            _missing(f"{ipath}.name", "the variable's name")
        var = r.string(item["name"], f"{ipath}.name")
        if not _ENV_NAME_RE.fullmatch(var):
            _invalid(
                f"{ipath}.name", var, "a variable name of letters, digits and '_', not starting with a digit"
            )
        if var in environment:
            _invalid(f"{ipath}.name", var, "a name not already used in environmentVariables or secrets")
        return var

    if "environmentVariables" in props:
        path = "properties.environmentVariables"
        for i, raw in enumerate(r.array(props["environmentVariables"], path)):
            ipath = f"{path}[{i}]"
            item = r.obj(raw, ipath, ("name", "value"))
            var = name_of(item, ipath)
            if "value" not in item:
                _missing(f"{ipath}.value", "the variable's value (a string)")
            value, has_key = r.str_and_key(item["value"], f"{ipath}.value", nonempty=False, key_allowed=True)
            environment[var] = value
            if has_key:
                keyed.append(var)
    if "secrets" in props:
        path = "properties.secrets"
        for i, raw in enumerate(r.array(props["secrets"], path)):
            ipath = f"{path}[{i}]"
            item = r.obj(raw, ipath, ("name", "value", "valueSecretReference"))
            var = name_of(item, ipath)
            if "valueSecretReference" in item:
                where = f"{ipath}.valueSecretReference"
                raise _error(
                    where,
                    None,
                    "value",
                    f"{where} is not supported: Key Vault references cannot be resolved client-side; "
                    "give the secret in 'value' (it is never written to job records or logs)",
                )
            if "value" not in item:
                _missing(f"{ipath}.value", "the secret's value (a string)")
            environment[var] = r.string(
                item["value"], f"{ipath}.value", nonempty=False, secret=True, key_allowed=True
            )
            secret_names.append(var)
    return environment, (*secret_names, *keyed)


def _parse_directories(r: _Reader, value: Any, path: str, *, output: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    known: tuple[str, ...] = ("id", "pathPrefix", "pathSuffix") if output else ("id", "path")
    for i, raw in enumerate(r.array(value, path)):
        ipath = f"{path}[{i}]"
        item = r.obj(raw, ipath, known, ignored=OUTPUT_DIRECTORY_IGNORED if output else ())
        if "id" not in item:
            _missing(f"{ipath}.id", "the directory's id (AZ_BATCHAI_INPUT_<id> / AZ_BATCHAI_OUTPUT_<id>)")
        ident = r.string(item["id"], f"{ipath}.id")
        if not OUTPUT_ID_RE.fullmatch(ident):
            _invalid(f"{ipath}.id", ident, "1-32 letters, digits and '_'")
        if ident in out:
            _invalid(f"{ipath}.id", ident, "an id not used by another directory of this list")
        if output:
            if "pathPrefix" not in item:
                _missing(f"{ipath}.pathPrefix", "the directory under which the output directory is made")
            directory = r.string(item["pathPrefix"], f"{ipath}.pathPrefix")
            if "pathSuffix" in item:
                suffix = r.string(item["pathSuffix"], f"{ipath}.pathSuffix", nonempty=False)
                if suffix.strip("/"):
                    directory = directory.rstrip("/") + "/" + suffix.strip("/")
        else:
            if "path" not in item:
                _missing(f"{ipath}.path", "the input directory's path")
            directory = r.string(item["path"], f"{ipath}.path")
        out[ident] = directory
    return out
