"""The examples that need no cloud and no machines: the SSH example's command line and dry run, and the
Azure tutorial's settings (imported, never run: it would provision GPU VMs)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from batchai_sdk import ValidationError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BATCHAI_SSH_")}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **(env or {})},
    )


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{Path(name).stem}", EXAMPLES / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_ssh_example_help() -> None:
    proc = run_example("ssh_cluster.py", "--help")
    assert proc.returncode == 0, proc.stderr
    for option in ("--share-path", "--key-file", "--trust-on-first-use", "--dry-run", "hosts"):
        assert option in proc.stdout


def test_ssh_example_dry_run_plans_the_job_from_env_hosts() -> None:
    proc = run_example(
        "ssh_cluster.py",
        "--dry-run",
        "--share-path",
        "/mnt/share",
        "--epochs",
        "3",
        env={"BATCHAI_SSH_HOSTS": "10.0.0.4, 10.0.0.5", "BATCHAI_SSH_USER": "azureuser"},
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["workspace"]["hosts"] == ["10.0.0.4", "10.0.0.5"]
    assert plan["workspace"]["user"] == "azureuser"
    job = plan["job"]
    assert job["node_count"] == 2
    assert job["python_script"] == "batchai_sdk.train.cifar10"
    # $VARS stay as written: they are expanded on the nodes, not here.
    assert job["args"][:2] == ["--dir", "$AZ_BATCHAI_OUTPUT_MODEL"]
    assert job["args"][-2:] == ["--epochs", "3"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--share-path", "/mnt/share"], "no hosts"),
        (["h1", "h2"], "--share-path"),
        (["h1", "h2", "--share-path", "/mnt/share", "--nodes", "3"], "--nodes must be between 1 and the 2"),
    ],
)
def test_ssh_example_refuses_incomplete_settings(args: list[str], message: str) -> None:
    proc = run_example("ssh_cluster.py", "--dry-run", *args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_ssh_example_passes_the_data_folder_to_the_training_module() -> None:
    proc = run_example(
        "ssh_cluster.py", "--dry-run", "h1", "--share-path", "/s", "--dataset", "cifar10", "--data-dir", "/d"
    )
    assert proc.returncode == 0, proc.stderr
    args = json.loads(proc.stdout)["job"]["args"]
    assert args[args.index("--dataset") + 1] == "cifar10"
    assert args[-2:] == ["--data-dir", "/d"]


def test_azure_tutorial_imports_without_touching_azure() -> None:
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('tutorial_azure', {str(EXAMPLES / 'tutorial_azure.py')!r})\n"
        "module = sys.modules['tutorial_azure'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "assert callable(module.main)\n"
        "print(sorted(m for m in sys.modules if m == 'azure' or m.startswith('azure.')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"  # importing the example neither imports the Azure SDK nor runs it


def test_azure_tutorial_settings_default_to_the_tutorial() -> None:
    tutorial = load("tutorial_azure.py")
    settings = tutorial.settings_from_env({"AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000"})
    assert (settings.resource_group, settings.location, settings.workspace) == (
        "batchai.horovod",
        "eastus",
        "batchaidev",
    )
    assert settings.nodes == 4 and settings.vm_priority == "dedicated" and not settings.delete_workspace
    custom = tutorial.settings_from_env(
        {
            "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
            "BATCHAI_NODES": "2",
            "BATCHAI_VM_PRIORITY": "lowpriority",
            "BATCHAI_DELETE_WORKSPACE": "1",
        }
    )
    assert (custom.nodes, custom.vm_priority, custom.delete_workspace) == (2, "lowpriority", True)


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({}, "AZURE_SUBSCRIPTION_ID"),
        ({"AZURE_SUBSCRIPTION_ID": "x", "BATCHAI_NODES": "four"}, "BATCHAI_NODES"),
        ({"AZURE_SUBSCRIPTION_ID": "x", "BATCHAI_EPOCHS": "0"}, "BATCHAI_EPOCHS"),
    ],
)
def test_azure_tutorial_settings_name_what_is_wrong(env: dict[str, str], field: str) -> None:
    tutorial = load("tutorial_azure.py")
    with pytest.raises(ValidationError) as caught:
        tutorial.settings_from_env(env)
    assert caught.value.field == field
