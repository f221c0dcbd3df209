"""Without the azure extra the SDK imports, and using Azure says what to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCK_AZURE = """
import importlib.abc, sys
class NoAzure(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "azure" or name.startswith("azure."):
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, NoAzure())
"""


def test_core_imports_and_workspace_azure_names_the_missing_extra() -> None:
    code = BLOCK_AZURE + textwrap.dedent(
        """
        import batchai_sdk, batchai_sdk.backends.azure
        from batchai_sdk import Workspace
        from batchai_sdk.exceptions import MissingExtraError
        assert not [m for m in sys.modules if m == "azure" or m.startswith("azure.")]
        try:
            Workspace.azure("ws", subscription_id="6d7b9c2e-1f3a-4b5c-8d9e-0a1b2c3d4e5f",
                            resource_group="rg", location="eastus")
        except MissingExtraError as exc:
            print(exc.package, exc.extra, exc)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    package, extra, message = proc.stdout.split(" ", 2)
    assert package.startswith("azure-") and extra == "azure"
    assert "pip install 'batchai_sdk[azure]'" in message
