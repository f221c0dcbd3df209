"""A job's toolkit (Batch AI's ``<toolkit>Settings``) and the settings each one accepts, checked."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

from .exceptions import ValidationError

__all__ = ["CNTK_LANGUAGES", "TOOLKIT_SETTING_KEYS", "TORCH_BACKENDS", "Toolkit", "validate_toolkit_settings"]


class Toolkit(str, enum.Enum):
    """How the job's processes are started: Batch AI's ``<toolkit>Settings`` of job.json."""

    HOROVOD = "horovod"
    CUSTOM_MPI = "custommpi"
    CUSTOM = "custom"
    PYTORCH = "pytorch"
    TENSORFLOW = "tensorflow"
    CHAINER = "chainer"
    CNTK = "cntk"
    CAFFE = "caffe"
    CAFFE2 = "caffe2"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: object) -> Toolkit:
        """``value`` as a Toolkit (any case); ValidationError naming ``toolkit`` otherwise."""
        try:
            return cls(value.lower() if isinstance(value, str) else value)
        except ValueError:
            names = ", ".join(t.value for t in cls)
            raise ValidationError("toolkit", value, f"one of {names}") from None

    @property
    def runs_command_line(self) -> bool:
        """custommpi and custom run ``command_line``; every other toolkit a script (or a config file)."""
        return self in (Toolkit.CUSTOM_MPI, Toolkit.CUSTOM)


TORCH_BACKENDS = ("tcp", "gloo", "nccl", "mpi")
CNTK_LANGUAGES = ("Python", "BrainScript")
# The keys of JobSpec.toolkit_settings each toolkit accepts (snake_case; job.json names in batchai_json).
TOOLKIT_SETTING_KEYS: dict[Toolkit, tuple[str, ...]] = {
    Toolkit.PYTORCH: ("communication_backend", "max_restarts"),
    Toolkit.TENSORFLOW: (
        "worker_count",
        "parameter_server_count",
        "master_args",
        "worker_args",
        "parameter_server_args",
    ),
    Toolkit.CNTK: ("language_type", "config_file"),
    Toolkit.CAFFE: ("config_file",),
}
_ARG_LISTS = ("master_args", "worker_args", "parameter_server_args")


def validate_toolkit_settings(toolkit: Toolkit, settings: object) -> dict[str, Any]:
    """``settings`` checked for ``toolkit`` and normalised (argument lists as lists); errors name the
    field as ``toolkit_settings.<key>``."""
    if not isinstance(settings, Mapping):
        raise ValidationError("toolkit_settings", settings, "a mapping of setting names to values")
    allowed = TOOLKIT_SETTING_KEYS.get(toolkit, ())
    out: dict[str, Any] = {}
    for key, value in settings.items():
        where = f"toolkit_settings.{key}"
        if key not in allowed:
            expected = f"one of {', '.join(allowed)}" if allowed else "no settings"
            raise ValidationError(where, value, f"{expected} for a {toolkit} job")
        if value is None:
            continue
        if key == "communication_backend":
            if not isinstance(value, str) or value.lower() not in TORCH_BACKENDS:
                raise ValidationError(where, value, "one of TCP, Gloo, NCCL, MPI (any case)")
        elif key in ("worker_count", "parameter_server_count", "max_restarts"):
            least = 1 if key == "worker_count" else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValidationError(where, value, f"an integer >= {least}")
        elif key in _ARG_LISTS:
            if isinstance(value, str) or not isinstance(value, Sequence):
                raise ValidationError(where, value, "a list of strings, one per argument")
            for i, arg in enumerate(value):
                if not isinstance(arg, str):
                    raise ValidationError(f"{where}[{i}]", arg, "a string")
            value = list(value)
        elif key == "language_type":
            if value not in CNTK_LANGUAGES:
                raise ValidationError(where, value, "'Python' or 'BrainScript'")
        elif key == "config_file" and (not isinstance(value, str) or not value.strip()):
            raise ValidationError(where, value, "a config file path")
        out[key] = value
    return out
