"""Fuzzing the job.json parser: whatever the document, it returns a JobSpec or raises BatchAIJsonError —
never a KeyError, TypeError or RecursionError — and never shows the storage key. Specs it produces
round-trip through to_job_json."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchai_sdk._models import JobSpec
from batchai_sdk.batchai_json import parse_job_json, to_job_json
from batchai_sdk.exceptions import BatchAIJsonError

TUTORIAL: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "tutorial_job.json").read_text())
NAMES = {"name": "fuzz", "experiment": "exp", "cluster": "c1"}
ACCOUNT = "acct"
KEY = "S3CRETKEY-never-shown=="
FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

SCHEMA_WORDS = """
properties $schema nodeCount horovodSettings customMpiSettings customToolkitSettings
pythonScriptFilePath commandLineArgs processCount pythonInterpreterPath commandLine
stdOutErrPathPrefix mountVolumes azureFileShares azureFileUrl relativeMountPath accountName
credentials accountKey accountKeySecretReference sourceVault secretUrl id fileMode directoryMode
jobPreparation containerSettings imageSourceRegistry image serverUrl username password shmSize
environmentVariables secrets name value valueSecretReference inputDirectories outputDirectories
path pathPrefix pathSuffix constraints maxWallClockTime cluster pyTorchSettings
azureBlobFileSystems
""".split()  # noqa: SIM905 - a word list reads better as words
SPECIAL_TEXT = [
    "", " ", "<AZURE_BATCHAI_STORAGE_ACCOUNT>", "<AZURE_BATCHAI_STORAGE_KEY>", "PT1H", "1.00:00:00", "P1Y",
    "'", '"', "\\", "$AZ_BATCHAI_JOB_MOUNT_ROOT/x", "0777", "myshare", "A_1",
    "https://<AZURE_BATCHAI_STORAGE_ACCOUNT>.file.core.windows.net/myshare",
]  # fmt: skip

texts = st.one_of(st.text(max_size=12), st.sampled_from(SPECIAL_TEXT), st.sampled_from(SCHEMA_WORDS))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=12,
)


def parse_or_schema_error(doc: Any) -> JobSpec | None:
    try:
        return parse_job_json(doc, **NAMES, storage_account=ACCOUNT, storage_key=KEY)
    except BatchAIJsonError as exc:
        assert KEY not in str(exc)
        assert exc.field  # a path (or the document) is always named
        return None


@FUZZ
@given(json_values)
def test_arbitrary_documents(value: Any) -> None:
    if not isinstance(value, str):  # a str is a file path
        parse_or_schema_error(value)
    parse_or_schema_error({"properties": value})
    parse_or_schema_error({"properties": {"horovodSettings": value}})
    parse_or_schema_error({"properties": {"customMpiSettings": {"commandLine": "x"}, "mountVolumes": value}})


@FUZZ
@given(
    st.one_of(
        st.text(max_size=40).map(lambda t: "{" + t),
        st.builds(json.dumps, st.dictionaries(texts, json_values, max_size=3)),
        st.builds(json.dumps, st.fixed_dictionaries({"properties": json_values})),
    )
)
def test_arbitrary_json_text(text: str) -> None:
    parse_or_schema_error(text)


def _locations(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            out.extend(_locations(child, (*prefix, key)))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            out.extend(_locations(child, (*prefix, i)))
    return out


TUTORIAL_LOCATIONS = _locations(TUTORIAL)


def _mutate(doc: Any, where: tuple[Any, ...], op: str, key: str, value: Any) -> Any:
    if not where:
        return value if op == "replace" else doc
    parent: Any = doc
    for part in where[:-1]:
        parent = parent[part]
    last = where[-1]
    if op == "delete":
        del parent[last]
    elif op == "replace":
        parent[last] = value
    elif isinstance(parent[last], dict):
        parent[last][key] = value
    elif isinstance(parent[last], list):
        parent[last].append(value)
    return doc


mutation = st.tuples(
    st.sampled_from(TUTORIAL_LOCATIONS),
    st.sampled_from(["delete", "replace", "add"]),
    st.one_of(st.sampled_from(SCHEMA_WORDS), st.text(max_size=8)),
    json_values,
)


@FUZZ
@given(st.lists(mutation, min_size=1, max_size=3))
def test_mutations_of_the_tutorial(mutations: list[tuple[tuple[Any, ...], str, str, Any]]) -> None:
    doc: Any = copy.deepcopy(TUTORIAL)
    for where, op, key, value in mutations:
        try:
            doc = _mutate(doc, where, op, key, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced that location
    if isinstance(doc, str):
        return  # a str source is a file path; documents as a whole are fuzzed above
    spec = parse_or_schema_error(doc)
    if spec is not None:
        assert parse_job_json(to_job_json(spec), **NAMES) == spec


# -- valid documents: the round trip ----------------------------------------------------------------

safe_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
nonblank = safe_text.filter(lambda s: s.strip() != "")
ident = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
dir_id = st.from_regex(r"[A-Za-z0-9_]{1,12}", fullmatch=True)


@st.composite
def valid_documents(draw: st.DrawFn) -> dict[str, Any]:
    props: dict[str, Any] = {}
    if draw(st.booleans()):
        props["nodeCount"] = draw(st.integers(1, 64))
    toolkit = draw(
        st.sampled_from(
            [
                "horovodSettings",
                "customMpiSettings",
                "customToolkitSettings",
                "pyTorchSettings",
                "tensorFlowSettings",
                "chainerSettings",
                "cntkSettings",
                "caffeSettings",
                "caffe2Settings",
            ]
        )
    )

    def shell_args() -> str:
        args = draw(st.lists(safe_text, max_size=4))
        return " ".join("'" + a.replace("'", "'\"'\"'") + "'" for a in args)

    if toolkit in (
        "pyTorchSettings",
        "tensorFlowSettings",
        "chainerSettings",
        "cntkSettings",
        "caffeSettings",
        "caffe2Settings",
    ):
        kit: dict[str, Any] = {}
        brainscript = toolkit == "cntkSettings" and draw(st.booleans())
        solver = toolkit == "caffeSettings" and draw(st.booleans())
        if brainscript:
            kit["languageType"] = draw(st.sampled_from(["BrainScript", "brainscript"]))
        elif toolkit == "cntkSettings" and draw(st.booleans()):
            kit["languageType"] = draw(st.sampled_from(["Python", "PYTHON"]))
        if brainscript or solver:
            kit["configFilePath"] = draw(nonblank)
        else:
            kit["pythonScriptFilePath"] = draw(nonblank)
        if draw(st.booleans()):
            kit["pythonInterpreterPath"] = draw(nonblank)
        if toolkit == "tensorFlowSettings":
            for key in ("masterCommandLineArgs", "workerCommandLineArgs", "parameterServerCommandLineArgs"):
                if draw(st.booleans()):
                    kit[key] = shell_args()
            if draw(st.booleans()):
                kit["workerCount"] = draw(st.integers(1, 64))
            if draw(st.booleans()):
                kit["parameterServerCount"] = draw(st.integers(0, 8))
        else:
            if draw(st.booleans()):
                kit["commandLineArgs"] = shell_args()
            if toolkit != "caffe2Settings" and draw(st.booleans()):
                kit["processCount"] = draw(st.integers(1, 128))
        if toolkit == "pyTorchSettings" and draw(st.booleans()):
            kit["communicationBackend"] = draw(st.sampled_from(["TCP", "gloo", "NCCL", "MPI"]))
        props[toolkit] = kit
    elif toolkit == "horovodSettings":
        hvd: dict[str, Any] = {"pythonScriptFilePath": draw(nonblank)}
        if draw(st.booleans()):
            args = draw(st.lists(safe_text, max_size=4))
            hvd["commandLineArgs"] = " ".join("'" + a.replace("'", "'\"'\"'") + "'" for a in args)
        if draw(st.booleans()):
            hvd["processCount"] = draw(st.integers(1, 128))
        if draw(st.booleans()):
            hvd["pythonInterpreterPath"] = draw(nonblank)
        props[toolkit] = hvd
    elif toolkit == "customMpiSettings":
        props[toolkit] = {"commandLine": draw(nonblank)}
        if draw(st.booleans()):
            props[toolkit]["processCount"] = draw(st.integers(1, 128))
    else:
        props[toolkit] = {"commandLine": draw(nonblank)}
    if draw(st.booleans()):
        props["stdOutErrPathPrefix"] = draw(nonblank)
    if draw(st.booleans()):
        share: dict[str, Any] = {
            "relativeMountPath": draw(st.from_regex(r"[a-z0-9_][a-z0-9._-]{0,10}", fullmatch=True))
        }
        if draw(st.booleans()):
            share["azureFileUrl"] = "https://<AZURE_BATCHAI_STORAGE_ACCOUNT>.file.core.windows.net/share"
            share["credentials"] = {"accountKey": "<AZURE_BATCHAI_STORAGE_KEY>"}
        props["mountVolumes"] = {"azureFileShares": [share]}
    if draw(st.booleans()):
        props["jobPreparation"] = {"commandLine": draw(nonblank)}
    if draw(st.booleans()):
        props["containerSettings"] = {
            "imageSourceRegistry": {"image": draw(st.from_regex(r"[a-z/:.0-9-]{1,20}", fullmatch=True))}
        }
    names = draw(st.lists(ident, unique=True, max_size=5))
    split = draw(st.integers(0, len(names)))
    values = st.one_of(
        safe_text, st.just("<AZURE_BATCHAI_STORAGE_KEY>"), st.just("<AZURE_BATCHAI_STORAGE_ACCOUNT>")
    )
    if names[:split]:
        props["environmentVariables"] = [{"name": n, "value": draw(values)} for n in names[:split]]
    if names[split:]:
        props["secrets"] = [{"name": n, "value": draw(safe_text)} for n in names[split:]]
    ids = draw(st.lists(dir_id, unique=True, max_size=3))
    if ids:
        props["inputDirectories"] = [{"id": i, "path": draw(nonblank)} for i in ids]
    ids = draw(st.lists(dir_id, unique=True, max_size=3))
    if ids:
        props["outputDirectories"] = [
            {"id": i, "pathPrefix": draw(nonblank), "pathSuffix": draw(safe_text)} for i in ids
        ]
    if draw(st.booleans()):
        props["constraints"] = {
            "maxWallClockTime": draw(
                st.one_of(
                    st.from_regex(
                        r"P([1-9]\d{0,3}D)?T[1-9]\d{0,4}H([0-5]?\dM)?([0-5]?\d(\.\d{1,6})?S)?", fullmatch=True
                    ),
                    st.from_regex(
                        r"(\d{1,3}\.)?(0\d|1\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,7})?", fullmatch=True
                    ),
                ).filter(lambda s: any(c in "123456789" for c in s))
            )
        }
    return {
        "$schema": "https://raw.githubusercontent.com/Azure/BatchAI/master/schemas/2018-05-01/job.json",
        "properties": props,
    }


@FUZZ
@given(valid_documents())
def test_valid_documents_parse_and_round_trip(doc: dict[str, Any]) -> None:
    spec = parse_job_json(doc, **NAMES, storage_account=ACCOUNT, storage_key=KEY)
    back = to_job_json(spec)
    assert parse_job_json(back, **NAMES) == spec
    assert parse_job_json(json.loads(json.dumps(back)), **NAMES) == spec
    assert KEY not in json.dumps(to_job_json(spec, redact=True))
    assert KEY not in json.dumps(spec.to_dict())
