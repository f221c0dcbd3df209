"""job.json's pyTorchSettings, tensorFlowSettings, chainerSettings, cntkSettings, caffeSettings and
caffe2Settings <-> JobSpec (toolkit, toolkit_settings), the launch side and the spec's own checks."""

from __future__ import annotations

from typing import Any

import pytest

from batchai_sdk import launch
from batchai_sdk._models import JobSpec, Toolkit
from batchai_sdk.batchai_json import parse_job_json, to_job_json
from batchai_sdk.exceptions import BatchAIJsonError, ValidationError

NAMES = {"name": "j", "experiment": "e", "cluster": "c"}


def doc(key: str, settings: dict[str, Any], node_count: int = 2) -> dict[str, Any]:
    return {"properties": {"nodeCount": node_count, key: settings}}


def roundtrip(spec: JobSpec) -> None:
    assert parse_job_json(to_job_json(spec), **NAMES) == spec
    assert JobSpec.from_dict(spec.to_dict(redact=False)) == spec


def test_pytorch_settings() -> None:
    spec = parse_job_json(
        doc(
            "pyTorchSettings",
            {
                "pythonScriptFilePath": "$AZ_BATCHAI_JOB_MOUNT_ROOT/mnist.py",
                "commandLineArgs": "--epochs 3 --dist-url $AZ_BATCHAI_PYTORCH_INIT_METHOD",
                "processCount": 4,
                "communicationBackend": "TCP",
                "pythonInterpreterPath": "/opt/conda/bin/python",
            },
        ),
        **NAMES,
    )
    assert spec == JobSpec(
        **NAMES,
        node_count=2,
        toolkit=Toolkit.PYTORCH,
        python_script="$AZ_BATCHAI_JOB_MOUNT_ROOT/mnist.py",
        args=("--epochs", "3", "--dist-url", "$AZ_BATCHAI_PYTORCH_INIT_METHOD"),
        process_count=4,
        python_interpreter="/opt/conda/bin/python",
        toolkit_settings={"communication_backend": "TCP"},
    )
    assert to_job_json(spec)["properties"]["pyTorchSettings"] == {
        "pythonScriptFilePath": "$AZ_BATCHAI_JOB_MOUNT_ROOT/mnist.py",
        "pythonInterpreterPath": "/opt/conda/bin/python",
        "commandLineArgs": "--epochs 3 --dist-url $AZ_BATCHAI_PYTORCH_INIT_METHOD",
        "processCount": 4,
        "communicationBackend": "TCP",
    }
    assert launch.toolkit_settings_for_launch(spec) == {"communication_backend": "TCP", "process_count": 4}
    roundtrip(spec)


def test_tensorflow_settings_batchai_recipe() -> None:
    # the shape of Batch AI's TensorFlow recipe (mnist_replica.py with a parameter server)
    settings = {
        "pythonScriptFilePath": "$AZ_BATCHAI_INPUT_SCRIPT/mnist_replica.py",
        "masterCommandLineArgs": "--job_name=worker --num_gpus=1 --ps_hosts=$AZ_BATCHAI_PS_HOSTS "
        "--worker_hosts=$AZ_BATCHAI_WORKER_HOSTS --task_index=$AZ_BATCHAI_TASK_INDEX",
        "workerCommandLineArgs": "--job_name=worker --task_index=$AZ_BATCHAI_TASK_INDEX",
        "parameterServerCommandLineArgs": "--job_name=ps --task_index=$AZ_BATCHAI_TASK_INDEX",
        "workerCount": 2,
        "parameterServerCount": 1,
    }
    spec = parse_job_json(doc("tensorFlowSettings", settings), **NAMES)
    assert spec.toolkit is Toolkit.TENSORFLOW
    assert spec.args == ()
    assert spec.toolkit_settings == {
        "master_args": [
            "--job_name=worker",
            "--num_gpus=1",
            "--ps_hosts=$AZ_BATCHAI_PS_HOSTS",
            "--worker_hosts=$AZ_BATCHAI_WORKER_HOSTS",
            "--task_index=$AZ_BATCHAI_TASK_INDEX",
        ],
        "worker_args": ["--job_name=worker", "--task_index=$AZ_BATCHAI_TASK_INDEX"],
        "parameter_server_args": ["--job_name=ps", "--task_index=$AZ_BATCHAI_TASK_INDEX"],
        "worker_count": 2,
        "parameter_server_count": 1,
    }
    assert to_job_json(spec)["properties"]["tensorFlowSettings"] == settings
    assert spec.total_processes == 3
    roundtrip(spec)


@pytest.mark.parametrize(
    ("key", "settings", "toolkit", "extra"),
    [
        ("chainerSettings", {"pythonScriptFilePath": "t.py", "processCount": 3}, Toolkit.CHAINER, {}),
        ("caffe2Settings", {"pythonScriptFilePath": "t.py", "commandLineArgs": "-x 1"}, Toolkit.CAFFE2, {}),
        (
            "cntkSettings",
            {"languageType": "brainscript", "configFilePath": "$X/cifar.cntk", "commandLineArgs": "a=1"},
            Toolkit.CNTK,
            {"language_type": "BrainScript", "config_file": "$X/cifar.cntk"},
        ),
        (
            "cntkSettings",
            {"languageType": "Python", "pythonScriptFilePath": "t.py"},
            Toolkit.CNTK,
            {"language_type": "Python"},
        ),
        (  # Microsoft's BrainScript recipes leave languageType out: Batch AI inferred it
            "cntkSettings",
            {"configFilePath": "$X/ConvNet_MNIST.cntk", "commandLineArgs": "a=1"},
            Toolkit.CNTK,
            {"language_type": "BrainScript", "config_file": "$X/ConvNet_MNIST.cntk"},
        ),
        (
            "caffeSettings",
            {"configFilePath": "solver.prototxt", "processCount": 2},
            Toolkit.CAFFE,
            {"config_file": "solver.prototxt"},
        ),
        ("caffeSettings", {"pythonScriptFilePath": "pycaffe.py"}, Toolkit.CAFFE, {}),
    ],
)
def test_other_toolkits(key: str, settings: dict[str, Any], toolkit: Toolkit, extra: dict[str, Any]) -> None:
    spec = parse_job_json(doc(key, settings), **NAMES)
    assert spec.toolkit is toolkit
    assert dict(spec.toolkit_settings) == extra
    roundtrip(spec)


@pytest.mark.parametrize(
    ("key", "settings", "path", "words"),
    [
        ("pyTorchSettings", {}, "properties.pyTorchSettings.pythonScriptFilePath", ["missing"]),
        (
            "pyTorchSettings",
            {"pythonScriptFilePath": "a.py", "communicationBackend": "zmq"},
            "properties.pyTorchSettings.communicationBackend",
            ["TCP, Gloo, NCCL, MPI"],
        ),
        (
            "pyTorchSettings",
            {"pythonScriptFilePath": "a.py", "processCount": 0},
            "properties.pyTorchSettings.processCount",
            ["integer >= 1"],
        ),
        (
            "pyTorchSettings",
            {"pythonScriptFilePath": "a.py", "workerCount": 2},
            "properties.pyTorchSettings.workerCount",
            ["unknown field"],
        ),
        (
            "tensorFlowSettings",
            {"pythonScriptFilePath": "a.py", "parameterServerCount": -1},
            "properties.tensorFlowSettings.parameterServerCount",
            ["integer >= 0"],
        ),
        (
            "tensorFlowSettings",
            {"pythonScriptFilePath": "a.py", "commandLineArgs": "x"},
            "properties.tensorFlowSettings.commandLineArgs",
            ["unknown field"],
        ),
        (
            "tensorFlowSettings",
            {"pythonScriptFilePath": "a.py", "workerCommandLineArgs": "'x"},
            "properties.tensorFlowSettings.workerCommandLineArgs",
            ["shell can split"],
        ),
        (
            "caffe2Settings",
            {"pythonScriptFilePath": "a.py", "processCount": 2},
            "properties.caffe2Settings.processCount",
            ["unknown field"],
        ),
        (
            "cntkSettings",
            {"languageType": "Lua", "pythonScriptFilePath": "a.py"},
            "properties.cntkSettings.languageType",
            ["'Python' or 'BrainScript'"],
        ),
        (
            "cntkSettings",
            {"languageType": "BrainScript"},
            "properties.cntkSettings.configFilePath",
            ["missing"],
        ),
        (
            "cntkSettings",
            {"languageType": "BrainScript", "configFilePath": "c", "pythonScriptFilePath": "a.py"},
            "properties.cntkSettings.pythonScriptFilePath",
            ["no Python script"],
        ),
        (
            "cntkSettings",
            {"configFilePath": "c", "pythonScriptFilePath": "a.py"},
            "properties.cntkSettings.configFilePath",
            ["no config file"],
        ),
        ("caffeSettings", {}, "properties.caffeSettings.configFilePath", ["missing", "exactly one of"]),
        (
            "caffeSettings",
            {"configFilePath": "c", "pythonScriptFilePath": "a.py"},
            "properties.caffeSettings",
            ["both"],
        ),
        (
            "chainerSettings",
            {"pythonScriptFilePath": 3},
            "properties.chainerSettings.pythonScriptFilePath",
            ["a string"],
        ),
    ],
)
def test_errors_name_the_json_path(key: str, settings: dict[str, Any], path: str, words: list[str]) -> None:
    with pytest.raises(BatchAIJsonError) as info:
        parse_job_json(doc(key, settings), **NAMES)
    assert info.value.field == path
    for word in words:
        assert word in str(info.value)


def test_two_toolkits_refused() -> None:
    both = {
        "properties": {
            "pyTorchSettings": {"pythonScriptFilePath": "a"},
            "chainerSettings": {"pythonScriptFilePath": "a"},
        }
    }
    with pytest.raises(
        BatchAIJsonError, match="has pyTorchSettings, chainerSettings; expected exactly one of"
    ):
        parse_job_json(both, **NAMES)


# ------------------------------------------------------------------------------------ the spec itself


def test_spec_checks_name_the_field() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"toolkit": "mxnet", "python_script": "a.py"}, "toolkit"),
        ({"toolkit": "pytorch"}, "python_script"),
        (
            {
                "toolkit": "pytorch",
                "python_script": "a.py",
                "toolkit_settings": {"communication_backend": "zmq"},
            },
            "toolkit_settings.communication_backend",
        ),
        (
            {"toolkit": "pytorch", "python_script": "a.py", "toolkit_settings": {"worker_count": 2}},
            "toolkit_settings.worker_count",
        ),
        ({"toolkit": "tensorflow", "python_script": "a.py", "args": ["x"]}, "args"),
        ({"toolkit": "tensorflow", "python_script": "a.py", "process_count": 2}, "process_count"),
        (
            {"toolkit": "tensorflow", "python_script": "a.py", "toolkit_settings": {"worker_args": "x"}},
            "toolkit_settings.worker_args",
        ),
        (
            {"toolkit": "tensorflow", "python_script": "a.py", "toolkit_settings": {"worker_args": ["x", 1]}},
            "toolkit_settings.worker_args[1]",
        ),
        (
            {"toolkit": "tensorflow", "python_script": "a.py", "toolkit_settings": {"worker_count": 0}},
            "toolkit_settings.worker_count",
        ),
        ({"toolkit": "caffe2", "python_script": "a.py", "process_count": 2}, "process_count"),
        (
            {"toolkit": "cntk", "toolkit_settings": {"language_type": "BrainScript"}},
            "toolkit_settings.config_file",
        ),
        ({"toolkit": "chainer", "python_script": "a.py", "toolkit_settings": ["x"]}, "toolkit_settings"),
        ({"toolkit": "custom"}, "command_line"),
    ]
    for fields, field in cases:
        with pytest.raises(ValidationError) as info:
            JobSpec(**NAMES, **fields)
        assert info.value.field == field, fields


def test_spec_normalises_and_serialises() -> None:
    spec = JobSpec(
        **NAMES,
        toolkit="TensorFlow",  # type: ignore[arg-type]
        python_script="a.py",
        toolkit_settings={"worker_args": ("--x", "1"), "worker_count": 2},
    )
    assert spec.toolkit is Toolkit.TENSORFLOW
    assert spec.toolkit_settings == {"worker_args": ["--x", "1"], "worker_count": 2}
    assert spec.to_dict()["toolkit_settings"] == {"worker_args": ["--x", "1"], "worker_count": 2}
    assert spec.total_processes == 3  # 2 workers and Batch AI's default parameter server
    roundtrip(spec)
    # an old record without toolkit_settings still loads
    old = JobSpec(**NAMES, python_script="a.py").to_dict()
    del old["toolkit_settings"]
    assert JobSpec.from_dict(old).toolkit_settings == {}


def test_create_job_speaks_pytorch(tmp_path: Any) -> None:
    from batchai_sdk import Workspace

    ws = Workspace.local(root=str(tmp_path / "ws"))
    cluster = ws.create_cluster("c", vm_size="local", nodes=2)
    exp = ws.create_experiment("e")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    job = exp.create_job(
        "t",
        cluster=cluster,
        node_count=2,
        toolkit="pytorch",
        python_script=str(script),
        process_count=4,
        toolkit_settings={"communication_backend": "gloo"},
    )
    assert job.spec.toolkit is Toolkit.PYTORCH
    assert launch.toolkit_settings_for_launch(job.spec) == {
        "communication_backend": "gloo",
        "process_count": 4,
    }
    with pytest.raises(ValidationError) as info:
        exp.create_job(
            "u",
            cluster=cluster,
            toolkit="pytorch",
            python_script=str(script),
            toolkit_settings={"communication_backend": "carrier-pigeon"},
        )
    assert info.value.field == "toolkit_settings.communication_backend"
