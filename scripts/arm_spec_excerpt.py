"""Write tests/data/arm_spec/definitions.json: the request-body definitions of the ARM operations
batchai_sdk calls, as the installed azure-mgmt-* packages carry them (their models are generated from
azure-rest-api-specs at the api-version each client sends; see tests/data/arm_spec/README.md).

Each definition lists its properties with their REST names, types, ``readOnly`` (a property only the
service sets) and ``required``. Enums stay strings (ARM's enums are ``modelAsString``). Run with the
project's .venv: ``.venv/bin/python scripts/arm_spec_excerpt.py``.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import importlib
import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "arm_spec" / "definitions.json"

# operation (verb, path template) → (package prefix, model module, model): what each request body is
OPERATIONS = {
    "PUT /subscriptions/{s}/resourcegroups/{rg}": (
        "resource",
        "azure.mgmt.resource.resources.models",
        "ResourceGroup",
    ),
    "PUT /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Storage/storageAccounts/{n}": (
        "storage",
        "azure.mgmt.storage.models",
        "StorageAccountCreateParameters",
    ),
    "PUT /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Network/networkSecurityGroups/{n}": (
        "network",
        "azure.mgmt.network.models",
        "NetworkSecurityGroup",
    ),
    "PUT /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Network/virtualNetworks/{n}": (
        "network",
        "azure.mgmt.network.models",
        "VirtualNetwork",
    ),
    "PUT /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{n}": (
        "compute",
        "azure.mgmt.compute.models",
        "VirtualMachineScaleSet",
    ),
    "PATCH /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{n}": (
        "compute",
        "azure.mgmt.compute.models",
        "VirtualMachineScaleSetUpdate",
    ),
    "POST /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{n}/delete": (  # noqa: E501
        "compute",
        "azure.mgmt.compute.models",
        "VirtualMachineScaleSetVMInstanceRequiredIDs",
    ),
    "POST /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{n}/virtualMachines/{i}/runCommand": (  # noqa: E501
        "compute",
        "azure.mgmt.compute.models",
        "RunCommandInput",
    ),
    "PUT /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Batch/batchAccounts/{n}": (
        "batch",
        "azure.mgmt.batch.models",
        "BatchAccountCreateParameters",
    ),
}

defs: dict[str, Any] = {}


def _string_like(t: Any) -> bool:
    inner = t.args[0] if isinstance(t, functools.partial) and t.args else t
    return inner is str or (isinstance(inner, type) and issubclass(inner, enum.Enum))


def schema_of(t: Any, prefix: str) -> Any:
    if not isinstance(t, functools.partial):
        return {}
    name = t.func.__name__
    if name == "_deserialize_with_optional":
        return schema_of(t.args[0], prefix)
    if name == "_deserialize_model":
        return ref(t.args[0], prefix)
    if name == "_deserialize_sequence":
        return {"type": "array", "items": schema_of(t.args[0], prefix)}
    if name == "_deserialize_dict":
        return {"type": "object", "additionalProperties": schema_of(t.args[0], prefix)}
    if name == "_deserialize_with_union":
        return {"type": "string"} if all(_string_like(m) for m in t.args[0]) else {}
    if name == "_deserialize_default":
        p = t.args[0]
        if isinstance(p, type) and issubclass(p, enum.Enum):
            return {"type": "string"}
        return {
            bool: {"type": "boolean"},
            int: {"type": "integer"},
            float: {"type": "number"},
            str: {"type": "string"},
        }.get(p, {})
    return {}


def ref(cls: Any, prefix: str) -> Any:
    name = f"{prefix}.{cls.__name__}"
    if name not in defs:
        defs[name] = None
        with contextlib.suppress(Exception):  # a model with required arguments
            cls()  # the model_base metaclass sets each field's REST name on first use
        props: dict[str, Any] = {}
        required: list[str] = []
        optional = ("Optional", "Union")  # Union: an enum or str, optional in every body sent here
        for c in reversed(cls.__mro__):
            for attr, v in vars(c).items():
                if type(v).__name__ == "_RestField":
                    s = schema_of(v._type, prefix)
                    if v._visibility == ["read"]:
                        s = {**s, "readOnly": True}
                    elif not any(w in str(c.__annotations__.get(attr, "Optional")) for w in optional):
                        required.append(v._rest_name) if v._rest_name not in required else None
                    props[v._rest_name] = s
        defs[name] = {"type": "object", "properties": props, **({"required": required} if required else {})}
    return {"$ref": f"#/definitions/{name}"}


# azure-mgmt-authorization 4.0 is msrest-generated; its one body, written from its _attribute_map and
# _validation (RoleAssignmentCreateParameters, 2022-04-01)
ROLE_ASSIGNMENT = {
    "authorization.RoleAssignmentCreateParameters": {
        "type": "object",
        "required": ["properties"],
        "properties": {"properties": {"$ref": "#/definitions/authorization.RoleAssignmentProperties"}},
    },
    "authorization.RoleAssignmentProperties": {
        "type": "object",
        "required": ["roleDefinitionId", "principalId"],
        "properties": {
            "scope": {"type": "string", "readOnly": True},
            "roleDefinitionId": {"type": "string"},
            "principalId": {"type": "string"},
            "principalType": {"type": "string"},
            "description": {"type": "string"},
            "condition": {"type": "string"},
            "conditionVersion": {"type": "string"},
            "createdOn": {"type": "string", "readOnly": True},
            "updatedOn": {"type": "string", "readOnly": True},
            "createdBy": {"type": "string", "readOnly": True},
            "updatedBy": {"type": "string", "readOnly": True},
            "delegatedManagedIdentityResourceId": {"type": "string"},
        },
    },
}


def main() -> None:
    operations = {}
    for op, (prefix, module, model) in OPERATIONS.items():
        ref(getattr(importlib.import_module(module), model), prefix)
        operations[op] = f"{prefix}.{model}"
    operations["PUT /{scope}/providers/Microsoft.Authorization/roleAssignments/{n}"] = (
        "authorization.RoleAssignmentCreateParameters"
    )
    defs.update(ROLE_ASSIGNMENT)
    OUT.write_text(
        json.dumps({"operations": operations, "definitions": defs}, indent=1, sort_keys=True) + "\n"
    )


if __name__ == "__main__":
    main()
