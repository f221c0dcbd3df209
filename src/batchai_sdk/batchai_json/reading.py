"""Reading a Batch AI JSON document: loading it, typed access to its fields, errors that name the JSON path.

Every module of this package reads through ``_Reader``, so a mistake anywhere is reported the same way:
``BatchAIJsonError`` whose ``field`` is the JSON path (``properties.horovodSettings.processCount``).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import warnings
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, NoReturn

from ..exceptions import BatchAIJsonError, BatchAIJsonWarning, NotFoundError

SCHEMA_URL = "https://raw.githubusercontent.com/Azure/BatchAI/master/schemas/2018-05-01/job.json"
ACCOUNT_PLACEHOLDER = "<AZURE_BATCHAI_STORAGE_ACCOUNT>"
KEY_PLACEHOLDER = "<AZURE_BATCHAI_STORAGE_KEY>"

_PLAIN_KEY_RE = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
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


_LISTED = 10  # an unknown field's message lists the known ones up to this many


class _Reader:
    """Typed access to the document; every failure names its JSON path."""

    def __init__(self, storage_account: str | None, storage_key: str | None) -> None:
        self.storage_account = storage_account
        self.storage_key = storage_key
        self.ignored: list[str] = []  # JSON paths of obsolete or read-only fields passed over (one warning)
        self.fields_page = "docs/job-json.md"  # where an unknown field's message sends the reader

    def obj(
        self,
        value: Any,
        path: str,
        known: Collection[str],
        unsupported: Mapping[str, str] | None = None,
        ignored: Collection[str] = (),
    ) -> Mapping[str, Any]:
        """``value`` as an object of ``known`` fields. A key in ``unsupported`` is refused with its reason;
        a key in ``ignored`` (an older API's or a read-only field) is dropped and its path remembered."""
        if not isinstance(value, Mapping):
            _invalid(path, value, "an object")
        unsupported = unsupported or {}
        for key in value:
            if key in unsupported:
                where = _join(path, key)
                raise _error(where, None, unsupported[key], f"{where} is {unsupported[key]}")
        for key in value:
            if isinstance(key, str) and key in ignored and key not in known:
                self.ignored.append(_join(path, key))
            elif not isinstance(key, str) or key not in known:
                self._unknown(_join(path, key), key, path, known)
        return {k: v for k, v in value.items() if k in known}

    def warn_ignored(self, document: str) -> None:
        """One warning naming every field passed over, as the az CLI of 2018 passed over them silently."""
        if self.ignored:
            warnings.warn(
                f"{document}: ignored {', '.join(self.ignored)} (read-only, or of an older Batch AI API; "
                "they change nothing)",
                BatchAIJsonWarning,
                stacklevel=4,
            )

    def _unknown(self, where: str, key: object, parent: str, known: Collection[str]) -> NoReturn:
        names = sorted(known)
        expected = f"one of the fields of {parent or 'the document'}: {', '.join(names)}"
        close = difflib.get_close_matches(str(key), names, n=1) if isinstance(key, str) else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        # a long list says little in one line: the docs list the fields, the exception keeps them
        shown = expected if len(names) <= _LISTED else f"a field of {parent} ({self.fields_page} lists them)"
        raise _error(where, None, expected, f"unknown field {where}{hint}; expected {shown}")

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


def _load(source: str | os.PathLike[str] | Mapping[str, Any], kind: str = "job.json") -> tuple[Any, str]:
    """The document and the name errors about the document as a whole use (``kind`` when not a file)."""
    if isinstance(source, Mapping):
        return source, kind
    if isinstance(source, str) and source.lstrip().startswith("{"):
        return _decode(source, kind), kind  # the document's text, not a file name
    if not isinstance(source, (str, os.PathLike)):
        _invalid(kind, source, f"a {kind} object (a mapping), its text, or the path of a {kind} file")
    path = Path(source).expanduser()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"{kind} file", str(path)) from None
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
