"""SSH host keys pinned through ARM instead of trusted on first use.

Each instance is asked for its host public key with a VMSS VM run-command (``RunShellScript``:
``cat /etc/ssh/ssh_host_ed25519_key.pub``). The answer travels over ARM's authenticated TLS channel,
so the key is the VM's own before the first SSH connection. Pins are kept per VM (``vmId``) in
``hostkeys.json`` in the workspace's state directory and written out as the workspace's known_hosts for
the addresses the instances have now, so a new VM that reuses an old private address gets its own key.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from ..._private_files import write_private
from ...exceptions import AzureError, HostKeyError, NodeError
from ...remote.fanout import fan_out
from .clients import AzureClients
from .errors import azure_call
from .models import cm

HOST_KEY_COMMAND = "cat /etc/ssh/ssh_host_ed25519_key.pub"
_KEY_LINE = re.compile(r"^(ssh-ed25519|ecdsa-sha2-nistp256|ssh-rsa)\s+([A-Za-z0-9+/=]+)(\s.*)?$")


def run_command_stdout(result: Mapping[str, Any]) -> str:
    """The stdout of a RunShellScript result.

    Linux VMs answer one status whose message reads ``Enable succeeded: \\n[stdout]\\n...\\n[stderr]\\n...``;
    the Windows shape has a ``ComponentStatus/StdOut/succeeded`` status of its own.
    """
    statuses = result.get("value") or []
    for status in statuses:
        if str(status.get("code", "")).startswith("ComponentStatus/StdOut"):
            return str(status.get("message") or "")
    for status in statuses:
        message = str(status.get("message") or "")
        if "[stdout]" in message:
            out = message.split("[stdout]", 1)[1]
            return out.split("[stderr]", 1)[0].strip("\n")
    return ""


def parse_host_key(stdout: str) -> paramiko.PKey:
    for line in stdout.splitlines():
        m = _KEY_LINE.match(line.strip())
        if m:
            try:
                return paramiko.PKey.from_type_string(m.group(1), base64.b64decode(m.group(2)))
            except (paramiko.SSHException, ValueError, binascii.Error) as exc:
                raise HostKeyError("run-command", f"the VM returned an unreadable host key: {exc}") from exc
    raise HostKeyError("run-command", "the VM returned no SSH host key (is sshd installed?)")


def fetch_host_key(clients: AzureClients, resource_group: str, vmss: str, instance_id: str) -> paramiko.PKey:
    """Ask one instance for its host key through ARM (a long-running operation of about a minute)."""
    operation = f"read the SSH host key of {vmss} instance {instance_id} (run-command)"
    with azure_call(operation):
        poller = clients.compute.virtual_machine_scale_set_vms.begin_run_command(
            resource_group,
            vmss,
            instance_id,
            cm.RunCommandInput(command_id="RunShellScript", script=[HOST_KEY_COMMAND]),
        )
        result = poller.result()
    data = result.as_dict() if hasattr(result, "as_dict") else dict(result or {})
    return parse_host_key(run_command_stdout(data))


@dataclass(frozen=True)
class Instance:
    """What pinning needs of an instance: its identity and the known_hosts names it is reached by."""

    vm_id: str
    instance_id: str
    names: tuple[str, ...]  # known_hosts spellings: "10.0.0.4", "[203.0.113.7]:2222"


class HostKeyPins:
    """``hostkeys.json`` (vmId → key) and the known_hosts file generated from it."""

    def __init__(self, state_dir: Path) -> None:
        self.pins_path = state_dir / "hostkeys.json"
        self.known_hosts = state_dir / "known_hosts"
        self._lock = threading.Lock()

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.pins_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        return {str(k): str(v) for k, v in data.items()}

    def missing(self, instances: Iterable[Instance]) -> list[Instance]:
        pinned = self._load()
        return [i for i in instances if i.vm_id not in pinned]

    def pin(
        self,
        instances: list[Instance],
        fetch: Callable[[Instance], paramiko.PKey],
        *,
        max_workers: int = 8,
    ) -> None:
        """Fetch the keys of instances not pinned yet (in parallel), then rewrite known_hosts for all of
        ``instances``. A failure names each instance and why (NodeError)."""
        todo = {inst.instance_id: inst for inst in self.missing(instances)}
        fetched = fan_out(todo, fetch, max_workers=max_workers)
        for error in fetched.failed.values():
            if not isinstance(error, AzureError | HostKeyError):
                raise error  # a fault of ours, not the VM's answer
        got = {todo[i].vm_id: f"{key.get_name()} {key.get_base64()}" for i, key in fetched.succeeded.items()}
        failures = fetched.reasons()
        with self._lock:
            pins = {**self._load(), **got}
            write_private(self.pins_path, json.dumps(pins, indent=2, sort_keys=True) + "\n", encoding="ascii")
            lines = [f"{name} {pins[i.vm_id]}\n" for i in instances if i.vm_id in pins for name in i.names]
            write_private(self.known_hosts, "".join(lines), encoding="ascii")
        if failures:
            raise NodeError("pinning host keys through ARM", failures, sorted(got))

    def forget(self, vm_ids: Iterable[str]) -> None:
        with self._lock:
            pins = self._load()
            for vm_id in vm_ids:
                pins.pop(vm_id, None)
            write_private(self.pins_path, json.dumps(pins, indent=2, sort_keys=True) + "\n", encoding="ascii")
