"""The Batch AI 2018-05-01 job.json schema <-> ``JobSpec``.

``parse_job_json`` reads the file people wrote for ``az batchai job create --config-file``;
``to_job_json`` writes a spec back in that shape, and ``parse_job_json(to_job_json(spec)) == spec``
for every spec the parser produces. Anything malformed, unknown or not supported raises
``BatchAIJsonError`` whose ``field`` is the JSON path (``properties.horovodSettings.processCount``).

Choices where the schema and this SDK differ:

* ``mountVolumes.azureFileShares`` holds at most one share: the workspace's. Its ``relativeMountPath``
  (one path segment) is where jobs see it under ``$AZ_BATCHAI_JOB_MOUNT_ROOT``. ``azureFileUrl``,
  ``accountName`` and ``credentials`` are checked and then dropped: the workspace mounts its own share with
  its own credentials. ``azureFileUrl`` is optional here (the schema requires it).
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
  "retryOnExitCodes": [75]}`` sets ``JobSpec.hang_timeout`` (0 turns the watchdog off), ``max_retries`` and
  ``retry_on_exit_codes``. ``to_job_json`` writes it only when one of them differs from its default, so
  documents without it stay exactly the Batch AI schema.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import shlex
from collections.abc import Callable, Collection, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, NoReturn

from ._models import CNTK_LANGUAGES, OUTPUT_ID_RE, TORCH_BACKENDS, JobSpec, Toolkit, default_hang_timeout
from .exceptions import BatchAIJsonError, NotFoundError, ValidationError

__all__ = [
    "ACCOUNT_PLACEHOLDER",
    "KEY_PLACEHOLDER",
    "SCHEMA_URL",
    "format_duration",
    "join_args",
    "parse_duration",
    "parse_job_json",
    "to_job_json",
]

SCHEMA_URL = "https://raw.githubusercontent.com/Azure/BatchAI/master/schemas/2018-05-01/job.json"
ACCOUNT_PLACEHOLDER = "<AZURE_BATCHAI_STORAGE_ACCOUNT>"
KEY_PLACEHOLDER = "<AZURE_BATCHAI_STORAGE_KEY>"

_PLAIN_KEY_RE = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MOUNT_PATH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
_FILE_MODE_RE = re.compile(r"^0?[0-7]{3}$")
_AZURE_FILE_URL_RE = re.compile(r"^https?://[A-Za-z0-9.-]+(?::\d+)?/([^/?#\s]+)/?$")
_ISO_DURATION_RE = re.compile(
    r"^P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)
_TIMESPAN_RE = re.compile(
    r"^(?:(?P<days>\d+)\.)?(?P<hours>\d{1,2}):(?P<minutes>\d{1,2}):(?P<seconds>\d{1,2}(?:\.\d{1,7})?)$"
)
# Arguments written bare by to_job_json; anything else is double-quoted (which keeps $VARS expandable).
_BARE_ARG_RE = re.compile(r"^[A-Za-z0-9_@%+=:,./${}-]+$")

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
_NO_PRIORITY = "not supported; a queued job starts as soon as enough of the cluster's nodes are free"
_PROPERTIES_UNSUPPORTED = {
    "cluster": "not supported in job.json; the cluster is given separately (--cluster / cluster=)",
    "priority": _NO_PRIORITY,
    "schedulingPriority": _NO_PRIORITY,
    "experimentName": "not supported in job.json; the experiment is given separately (--experiment)",
}
_PROPERTIES_KNOWN = (
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
_ONE_SHARE = "not supported; only the workspace's file share can be mounted (mountVolumes.azureFileShares)"
_MOUNT_UNSUPPORTED = {
    "azureBlobFileSystems": _ONE_SHARE,
    "fileServers": _ONE_SHARE,
    "unmanagedFileSystems": _ONE_SHARE,
}
# Where the storage key placeholder may be filled in (the value stays secret there).
_KEY_ALLOWED = "credentials.accountKey, secrets[].value or environmentVariables[].value"


# --------------------------------------------------------------------------------------------------
# errors


def _describe(value: Any) -> str:
    """A short, safe rendering of an offending value (never recurses into containers)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a very large integer"
        return text
    if isinstance(value, str):
        shown = repr(value)
        return shown if len(shown) <= 80 else shown[:77] + "..."
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def _error(path: str, value: Any, expected: str, message: str) -> BatchAIJsonError:
    err = BatchAIJsonError(path, None, expected)
    err.value = value if isinstance(value, (str, int, float, bool)) or value is None else None
    # ValidationError's "invalid X: V; expected E" does not fit unknown or unsupported fields.
    err.args = (message,)
    return err


def _invalid(path: str, value: Any, expected: str, *, secret: bool = False) -> NoReturn:
    shown = "a secret value" if secret else _describe(value)
    err = _error(path, None if secret else value, expected, f"invalid {path}: {shown}; expected {expected}")
    raise err


def _missing(path: str, expected: str) -> NoReturn:
    raise _error(path, None, expected, f"missing {path}; expected {expected}")


def _join(path: str, key: object) -> str:
    """``a.b`` for plain keys, ``a["odd key"]`` for the rest, so the path always says where."""
    if isinstance(key, str) and _PLAIN_KEY_RE.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(str(key))}]"


# --------------------------------------------------------------------------------------------------
# durations


def parse_duration(text: str) -> float:
    """Seconds in an ISO-8601 duration (``PT1H30M``, ``P1DT2H``) or a .NET TimeSpan (``1.00:00:00``).

    Raises ValueError when ``text`` is neither, uses years or months, is zero or is too large.
    """
    iso = _ISO_DURATION_RE.fullmatch(text)
    span = None if iso else _TIMESPAN_RE.fullmatch(text)
    if iso and any(iso.groupdict().values()) and not text.endswith("T"):
        parts = iso.groupdict()
        factors = {"weeks": 604800, "days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}
    elif span:
        parts = span.groupdict()
        if int(parts["hours"]) > 23 or int(parts["minutes"]) > 59 or Decimal(parts["seconds"]) >= 60:
            raise ValueError(f"{text!r}: hours must be < 24, minutes and seconds < 60")
        factors = {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}
    else:
        raise ValueError(f"{text!r} is not a duration like 'PT1H30M' or '1.00:00:00'")
    try:
        total = sum((Decimal(parts[k]) * f for k, f in factors.items() if parts.get(k)), Decimal(0))
        seconds = float(total)
    except (InvalidOperation, OverflowError):
        raise ValueError(f"{text!r} is too large") from None
    if not math.isfinite(seconds) or seconds > 1e15:
        raise ValueError(f"{text!r} is too large")
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return seconds


def format_duration(seconds: float) -> str:
    """An ISO-8601 duration that ``parse_duration`` reads back as exactly ``seconds``."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"not a positive duration: {seconds!r}")
    if seconds == int(seconds) and seconds < 1e15:
        whole = int(seconds)
        hours, rest = divmod(whole, 3600)
        minutes, secs = divmod(rest, 60)
        out = "PT" + (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
        return out + (f"{secs}S" if secs or out == "PT" else "")
    # repr is the shortest text that reads back as the same float; Decimal spells it without exponent.
    return f"PT{Decimal(repr(float(seconds))):f}S"


# --------------------------------------------------------------------------------------------------
# command line arguments


def _quote_arg(arg: str) -> str:
    if _BARE_ARG_RE.fullmatch(arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def join_args(args: Collection[str]) -> str:
    """``commandLineArgs`` for ``args``: ``shlex.split`` gives them back; ``$VARS`` stay expandable."""
    return " ".join(_quote_arg(a) for a in args)


# --------------------------------------------------------------------------------------------------
# parsing


class _Reader:
    """Typed access to the document; every failure names its JSON path."""

    def __init__(self, storage_account: str | None, storage_key: str | None) -> None:
        self.storage_account = storage_account
        self.storage_key = storage_key

    def obj(
        self,
        value: Any,
        path: str,
        known: Collection[str],
        unsupported: Mapping[str, str] | None = None,
    ) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            _invalid(path, value, "an object")
        unsupported = unsupported or {}
        for key in value:
            if key in unsupported:
                where = _join(path, key)
                raise _error(where, None, unsupported[key], f"{where} is {unsupported[key]}")
        for key in value:
            if not isinstance(key, str) or key not in known:
                self._unknown(_join(path, key), key, path, known)
        return value

    @staticmethod
    def _unknown(where: str, key: object, parent: str, known: Collection[str]) -> NoReturn:
        names = sorted(known)
        expected = f"one of the fields of {parent or 'the document'}: {', '.join(names)}"
        close = difflib.get_close_matches(str(key), names, n=1) if isinstance(key, str) else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise _error(where, None, expected, f"unknown field {where}{hint}; expected {expected}")

    def array(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, (list, tuple)):
            _invalid(path, value, "a list")
        return list(value)

    def integer(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            _invalid(path, value, "an integer >= 1")
        return value

    def string(
        self,
        value: Any,
        path: str,
        *,
        nonempty: bool = True,
        secret: bool = False,
        key_allowed: bool = False,
    ) -> str:
        """A string with the storage placeholders filled in."""
        text, _ = self.str_and_key(value, path, nonempty=nonempty, secret=secret, key_allowed=key_allowed)
        return text

    def str_and_key(
        self,
        value: Any,
        path: str,
        *,
        nonempty: bool = True,
        secret: bool = False,
        key_allowed: bool = False,
    ) -> tuple[str, bool]:
        """Like ``string``; also whether the storage key was filled in."""
        if not isinstance(value, str):
            _invalid(path, value, "a string", secret=secret)
        if nonempty and not value.strip():
            _invalid(path, value, "a non-empty string", secret=secret)
        has_key = KEY_PLACEHOLDER in value
        if has_key:
            if not key_allowed:
                raise _error(
                    path,
                    None,
                    f"the storage key only in {_KEY_ALLOWED}",
                    f"{path} uses {KEY_PLACEHOLDER}; the storage key may only be used in {_KEY_ALLOWED} "
                    "(anywhere else it would be written to job records)",
                )
            if self.storage_key is None:
                raise _error(
                    path,
                    None,
                    "a storage account key",
                    f"{path} uses {KEY_PLACEHOLDER} but no storage account key was given "
                    "(--storage-account-key / storage_key=)",
                )
            value = value.replace(KEY_PLACEHOLDER, self.storage_key)
        if ACCOUNT_PLACEHOLDER in value:
            if self.storage_account is None:
                raise _error(
                    path,
                    None,
                    "a storage account name",
                    f"{path} uses {ACCOUNT_PLACEHOLDER} but no storage account name was given "
                    "(--storage-account-name / storage_account=)",
                )
            value = value.replace(ACCOUNT_PLACEHOLDER, self.storage_account)
        return value, has_key

    def shown(self, value: str) -> str:
        """``value`` as it may appear in an error: the storage key never does."""
        return value.replace(self.storage_key, "***") if self.storage_key else value

    def key_vault_ref(self, value: Any, path: str) -> None:
        ref = self.obj(value, path, ("sourceVault", "secretUrl"))
        if "sourceVault" not in ref:
            _missing(_join(path, "sourceVault"), "an object with the Key Vault's resource id")
        if "secretUrl" not in ref:
            _missing(_join(path, "secretUrl"), "the secret's URL")
        vault = self.obj(ref["sourceVault"], _join(path, "sourceVault"), ("id",))
        if "id" not in vault:
            _missing(_join(path, "sourceVault.id"), "the Key Vault's resource id")
        self.string(vault["id"], _join(path, "sourceVault.id"))
        self.string(ref["secretUrl"], _join(path, "secretUrl"))


def _load(source: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[Any, str]:
    """The document and the name errors about the document as a whole use."""
    if isinstance(source, Mapping):
        return source, "job.json"
    if isinstance(source, str) and source.lstrip().startswith("{"):
        return _decode(source, "job.json"), "job.json"  # the document's text, not a file name
    if not isinstance(source, (str, os.PathLike)):
        _invalid(
            "job.json", source, "a job.json object (a mapping), its text, or the path of a job.json file"
        )
    path = Path(source).expanduser()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise NotFoundError("job.json file", str(path)) from None
    except (OSError, ValueError) as exc:  # a directory, no permission, a NUL in the name
        where = str(path)
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise _error(where, None, "a readable file", f"cannot read {where}: {why}") from None
    return _decode(raw, str(path)), str(path)


def _decode(text: str | bytes, where: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKeyError as exc:
        raise _error(
            where, None, "unique keys", f"{where}: key {exc.key!r} appears twice in one object"
        ) from None
    except json.JSONDecodeError as exc:
        msg = f"{where} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        raise _error(where, None, "a JSON document", msg) from None
    except (ValueError, RecursionError) as exc:  # undecodable bytes, absurd nesting
        raise _error(where, None, "a JSON document", f"{where} is not valid JSON: {exc}") from None


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(key)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def parse_job_json(
    source: str | os.PathLike[str] | Mapping[str, Any],
    *,
    name: str,
    experiment: str,
    cluster: str,
    storage_account: str | None = None,
    storage_key: str | None = None,
) -> JobSpec:
    """The ``JobSpec`` a Batch AI 2018-05-01 job.json describes.

    ``source`` is the path (str or PathLike) of a job.json file, the document's text (a str starting with
    ``{``) or the parsed document. ``name``, ``experiment`` and ``cluster`` are what
    ``az batchai job create`` took as flags. ``storage_account`` /
    ``storage_key`` fill the ``<AZURE_BATCHAI_STORAGE_ACCOUNT>`` / ``<AZURE_BATCHAI_STORAGE_KEY>``
    placeholders. Raises ``BatchAIJsonError`` (its ``field`` is the JSON path) for anything malformed,
    unknown or not supported, NotFoundError when the file does not exist.
    """
    document, _ = _load(source)
    reader = _Reader(storage_account, storage_key)
    fields = _parse_document(reader, document)
    try:
        return JobSpec(name=name, experiment=experiment, cluster=cluster, **fields)
    except BatchAIJsonError:
        raise
    except ValidationError as exc:
        # The checks above cover every JobSpec rule; this keeps the promise if JobSpec gains one.
        if exc.field in ("job name", "experiment name", "cluster name"):
            raise
        where = _SPEC_FIELD_PATHS.get(exc.field.split(".")[0].split("[")[0], "properties")
        raise _error(where, None, exc.expected, f"invalid {where}: expected {exc.expected}") from exc


_SPEC_FIELD_PATHS = {
    "node_count": "properties.nodeCount",
    "python_script": "properties.horovodSettings.pythonScriptFilePath",
    "args": "properties.horovodSettings.commandLineArgs",
    "command_line": "properties",
    "process_count": "properties",
    "environment": "properties.environmentVariables",
    "input_directories": "properties.inputDirectories",
    "output_directories": "properties.outputDirectories",
    "max_wall_clock_seconds": "properties.constraints.maxWallClockTime",
    "hang_timeout": "batchaiSdk.hangTimeoutSeconds",
    "max_retries": "batchaiSdk.maxRetries",
    "retry_on_exit_codes": "batchaiSdk.retryOnExitCodes",
}


def _parse_document(r: _Reader, document: Any) -> dict[str, Any]:
    top = r.obj(document, "", ("$schema", "properties", SDK_EXTENSION))
    if "$schema" in top:
        r.string(top["$schema"], "$schema")
    if "properties" not in top:
        _missing("properties", "an object with the job's settings (nodeCount, horovodSettings, ...)")
    props = r.obj(top["properties"], "properties", _PROPERTIES_KNOWN, _PROPERTIES_UNSUPPORTED)

    fields: dict[str, Any] = {}
    if "nodeCount" in props:
        fields["node_count"] = r.integer(props["nodeCount"], "properties.nodeCount")
    fields.update(_parse_toolkit(r, props))
    if "stdOutErrPathPrefix" in props:
        fields["std_out_err_path_prefix"] = r.string(
            props["stdOutErrPathPrefix"], "properties.stdOutErrPathPrefix"
        )
    if "mountVolumes" in props:
        fields["mount_path"] = _parse_mount_volumes(r, props["mountVolumes"], "properties.mountVolumes")
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


# --------------------------------------------------------------------------------------------------
# the batchaiSdk extension: hang watchdog and retries (docs/survive.md)

SDK_EXTENSION = "batchaiSdk"
_SDK_KEYS = ("hangTimeoutSeconds", "maxRetries", "retryOnExitCodes")


def _parse_sdk_extension(r: _Reader, top: Mapping[str, Any]) -> dict[str, Any]:
    """``hang_timeout``, ``max_retries``, ``retry_on_exit_codes`` from the top-level ``batchaiSdk`` object."""
    if SDK_EXTENSION not in top:
        return {}
    ext = r.obj(top[SDK_EXTENSION], SDK_EXTENSION, _SDK_KEYS)
    fields: dict[str, Any] = {}
    if "hangTimeoutSeconds" in ext:
        value = ext["hangTimeoutSeconds"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            _invalid(
                f"{SDK_EXTENSION}.hangTimeoutSeconds", value, "a number of seconds > 0, or 0 for no watchdog"
            )
        fields["hang_timeout"] = float(value)
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


def _sdk_extension_json(spec: JobSpec) -> dict[str, Any]:
    """The ``batchaiSdk`` object for ``spec``, holding only what differs from the defaults ({} if nothing)."""
    ext: dict[str, Any] = {}
    if spec.hang_timeout != default_hang_timeout(spec.python_script):
        timeout = spec.hang_timeout or 0.0
        ext["hangTimeoutSeconds"] = int(timeout) if float(timeout).is_integer() else timeout
    if spec.max_retries:
        ext["maxRetries"] = spec.max_retries
    if spec.retry_on_exit_codes:
        ext["retryOnExitCodes"] = list(spec.retry_on_exit_codes)
    return {SDK_EXTENSION: ext} if ext else {}


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


def _parse_mount_volumes(r: _Reader, value: Any, path: str) -> str | None:
    volumes = r.obj(value, path, ("azureFileShares",), _MOUNT_UNSUPPORTED)
    if "azureFileShares" not in volumes:
        return None
    shares = r.array(volumes["azureFileShares"], f"{path}.azureFileShares")
    if len(shares) > 1:
        where = f"{path}.azureFileShares[1]"
        raise _error(
            where,
            None,
            "a single file share",
            f"{where}: only one file share (the workspace's) can be mounted; remove the others",
        )
    if not shares:
        return None
    return _parse_file_share(r, shares[0], f"{path}.azureFileShares[0]")


def _parse_file_share(r: _Reader, value: Any, path: str) -> str:
    share = r.obj(
        value,
        path,
        ("accountName", "azureFileUrl", "credentials", "relativeMountPath", "fileMode", "directoryMode"),
    )
    if "relativeMountPath" not in share:
        _missing(
            f"{path}.relativeMountPath",
            "the directory name the share is seen under $AZ_BATCHAI_JOB_MOUNT_ROOT",
        )
    mount_path = r.string(share["relativeMountPath"], f"{path}.relativeMountPath")
    if not _MOUNT_PATH_RE.fullmatch(mount_path):
        _invalid(
            f"{path}.relativeMountPath",
            r.shown(mount_path),
            "one directory name of letters, digits, '.', '_' and '-' (at most 64), such as 'myshare'",
        )
    if "azureFileUrl" in share:
        url = r.string(share["azureFileUrl"], f"{path}.azureFileUrl")
        if not _AZURE_FILE_URL_RE.fullmatch(url):
            _invalid(
                f"{path}.azureFileUrl",
                r.shown(url),
                "a URL like https://<account>.file.core.windows.net/<share>",
            )
    if "accountName" in share:
        r.string(share["accountName"], f"{path}.accountName")
    for mode in ("fileMode", "directoryMode"):
        if mode in share:
            text = r.string(share[mode], f"{path}.{mode}")
            if not _FILE_MODE_RE.fullmatch(text):
                _invalid(f"{path}.{mode}", r.shown(text), "an octal mode such as '0777'")
    if "credentials" in share:
        cpath = f"{path}.credentials"
        creds = r.obj(share["credentials"], cpath, ("accountKey", "accountKeySecretReference"))
        if "accountKey" in creds:
            r.string(creds["accountKey"], f"{cpath}.accountKey", secret=True, key_allowed=True)
        if "accountKeySecretReference" in creds:
            r.key_vault_ref(creds["accountKeySecretReference"], f"{cpath}.accountKeySecretReference")
    return mount_path


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
        item = r.obj(raw, ipath, known)
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


# --------------------------------------------------------------------------------------------------
# writing


def to_job_json(spec: JobSpec, *, storage_account: str | None = None, redact: bool = False) -> dict[str, Any]:
    """The Batch AI job.json document for ``spec`` (``name``, ``experiment`` and ``cluster`` are not in it).

    Secret variables are written to ``secrets`` with their values, so that
    ``parse_job_json(to_job_json(spec), ...) == spec``; with ``redact=True`` their values are ``"***"``
    (for display and records; such a document no longer round-trips). ``azureFileUrl`` is written only when
    ``storage_account`` is given (parse the result with the same ``storage_account``). Raises ValidationError
    for a spec the schema cannot express (e.g. ``process_count`` on a custom toolkit job).
    """
    props: dict[str, Any] = {"nodeCount": spec.node_count}
    props.update(_toolkit_json(spec))
    if spec.std_out_err_path_prefix is not None:
        props["stdOutErrPathPrefix"] = spec.std_out_err_path_prefix
    if spec.mount_path is not None:
        if not _MOUNT_PATH_RE.fullmatch(spec.mount_path):
            raise ValidationError(
                "mount_path", spec.mount_path, "one directory name (job.json relativeMountPath)"
            )
        share: dict[str, Any] = {"relativeMountPath": spec.mount_path}
        if storage_account is not None:
            share = {
                "azureFileUrl": f"https://{storage_account}.file.core.windows.net/{spec.mount_path}",
                **share,
            }
        props["mountVolumes"] = {"azureFileShares": [share]}
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
