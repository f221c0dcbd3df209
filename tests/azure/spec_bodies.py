"""Request bodies checked against a REST spec excerpt's definitions (jsonschema, by oav's rules for a
request: an undeclared or read-only property is an error), shared by the fake ARM
(``tests/data/arm_spec``) and the fake Batch service (``tests/data/batch_spec``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from jsonschema import Draft4Validator  # type: ignore[import-untyped]


def _closed(schema: Any) -> Any:
    """Each object definition with ``additionalProperties: false`` unless it says otherwise, and each
    ``readOnly`` property refused (oav's rules for a request: an undeclared or read-only property is an
    error; ARM itself answers an unknown member with ``InvalidRequestContent``)."""
    if isinstance(schema, dict):
        if schema.get("readOnly") is True:
            return {"not": {}, "description": "read-only: set by the service, never in a request"}
        out = {k: _closed(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


class SpecBodies:
    """The request bodies of the operations a spec excerpt (``{"definitions", "operations"}``) lists,
    checked against its definitions. Path templates' ``{name}`` match one segment, ``{scope}`` several;
    ``ignore_case`` matches them case-insensitively (as ARM does); an error's property path is joined with
    ``separator``."""

    def __init__(self, spec: Path, *, ignore_case: bool, separator: str) -> None:
        doc = json.loads(spec.read_text())
        self.definitions = _closed(doc["definitions"])
        self.separator = separator
        self.operations = []
        for op, name in doc["operations"].items():
            verb, template = op.split()
            rx = re.sub(r"\\\{scope\\\}", ".+", re.escape(template))
            rx = re.sub(r"\\\{[^}]+\\\}", "[^/]+", rx)
            self.operations.append((verb, re.compile("^" + rx + "$", re.I if ignore_case else 0), name))

    def errors(self, method: str, path: str, body: Any) -> tuple[str, list[str]] | None:
        """(definition, its errors) for a body the excerpt defines; None for other requests."""
        for verb, rx, name in self.operations:
            if verb == method and rx.match(path):
                schema = {"$ref": f"#/definitions/{name}", "definitions": self.definitions}
                found = Draft4Validator(schema).iter_errors(body if body is not None else {})
                return name, sorted(
                    f"{self.separator.join(str(p) for p in e.absolute_path) or '(body)'}: "
                    + (
                        "read-only (set by the service, not in a request)"
                        if e.validator == "not"
                        else e.message
                    )
                    for e in found
                )
        return None
