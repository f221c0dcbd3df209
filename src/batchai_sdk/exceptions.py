"""One root, ``BatchAIError``; typed children carry the data a caller needs to react.

Lower-layer errors (paramiko, azure-core, OSError) are translated at the boundary with
``raise ... from exc`` so that callers catch one family. No message ever contains a secret.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping
from typing import Any

# A field or mapping key with one of these words in its name holds a secret: an error shows "***" for it.
_SECRET_NAME = re.compile(r"key|secret|passw|token|sas|credential|connection_string|signature", re.IGNORECASE)
# fields that name or locate a secret but do not hold it: variable names, a key file's path
_NAMES_ONLY = ("_names", "secret_environment", "_file", "_path")


def _secret_name(name: object) -> bool:
    text = str(name).rsplit(".", 1)[-1].rsplit(":", 1)[-1].strip()
    return bool(_SECRET_NAME.search(text)) and not text.endswith(_NAMES_ONLY)


def masked(value: Any, field: str = "") -> Any:
    """``value`` as an error may show it: "***" for a secret-named field, and for every secret-named key
    at any depth of a mapping or list (a mount given as a dict keeps its other fields readable)."""
    if _secret_name(field) and value is not None:
        return "***"
    if isinstance(value, Mapping):
        return {k: ("***" if _secret_name(k) and v is not None else masked(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(masked(v) for v in value)
    return value


class BatchAIError(Exception):
    """Root of every error batchai_sdk raises on purpose."""


class ValidationError(BatchAIError, ValueError):
    """A value given by the caller is not acceptable. ``field`` names it, ``expected`` says what would be."""

    def __init__(self, field: str, value: Any, expected: str) -> None:
        self.field = field
        self.value = value = masked(value, field)  # never a secret in the message, ``value`` or repr
        self.expected = expected
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"invalid {field}: {shown}; expected {expected}")


class NothingToEvictError(ValidationError):
    """``simulate_eviction()`` without a node on a cluster that runs no job: there is no node to hit."""

    def __init__(self, cluster: str) -> None:
        self.field, self.value, self.cluster = "node", None, cluster
        self.expected = "a node that runs a job"
        BatchAIError.__init__(
            self,
            f"cluster {cluster!r} runs no job, so there is no node to evict: submit a job to it first "
            "(an eviction hits a node while a job runs there)",
        )


class UnsupportedVMSizeError(ValidationError):
    """A VM size Azure no longer offers (retired): ``size``, ``retired`` (ISO date), ``suggestions``."""

    def __init__(self, size: str, retired: str, suggestions: tuple[str, ...]) -> None:
        self.size = size
        self.retired = retired
        self.suggestions = suggestions
        instead = f"a current size such as {', '.join(suggestions)}" if suggestions else "a current size"
        super().__init__("vm_size", size, f"{instead} ({size} was retired by Azure on {retired})")


class NotFoundError(BatchAIError, LookupError):
    """A named resource (experiment, cluster, job, file) does not exist; ``hint`` says how to make it."""

    def __init__(self, kind: str, name: str, where: str | None = None, hint: str | None = None) -> None:
        self.kind = kind
        self.name = name
        self.where = where
        self.hint = hint
        suffix = f" in {where}" if where else ""
        super().__init__(f"{kind} {name!r} not found{suffix}" + (f"; {hint}" if hint else ""))


class AlreadyExistsError(BatchAIError):
    """A name is taken; ``hint`` says the way out (get it, or pass ``exist_ok=True``)."""

    def __init__(self, kind: str, name: str, where: str | None = None, hint: str | None = None) -> None:
        self.kind = kind
        self.name = name
        self.where = where
        self.hint = hint
        suffix = f" in {where}" if where else ""
        super().__init__(f"{kind} {name!r} already exists{suffix}" + (f": {hint}" if hint else ""))


class ClusterBusyError(BatchAIError):
    """The cluster runs jobs; the operation needs ``force=True`` (which terminates them)."""

    def __init__(self, cluster: str, jobs: list[str]) -> None:
        self.cluster = cluster
        self.jobs = jobs
        super().__init__(
            f"cluster {cluster!r} is running job(s) {', '.join(jobs)}; "
            "terminate them first or pass force=True"
        )


class CapacityError(BatchAIError):
    """More nodes asked of a cluster than it has."""

    def __init__(self, cluster: str, requested: int, available: int, *, autoscale: bool = False) -> None:
        self.cluster = cluster
        self.requested = requested
        self.available = available
        way = (
            f"raise its autoscale maximum (cluster.set_autoscale(min_nodes=..., max_nodes={requested}))"
            if autoscale
            else f"resize it (cluster.resize({requested}))"
        )
        super().__init__(
            f"the job needs {requested} node(s) but cluster {cluster!r} has {available}: "
            f"{way} or ask for fewer nodes"
        )


class JobFailedError(BatchAIError):
    """Raised by ``Job.wait(raise_on_failure=True)`` when the job did not succeed."""

    def __init__(self, job: str, state: str, exit_code: int | None, reason: str | None) -> None:
        self.job = job
        self.state = state
        self.exit_code = exit_code
        self.reason = reason
        super().__init__(f"job {job!r} {state} (exit code {exit_code}): {reason or 'no reason recorded'}")


class BatchAITimeoutError(BatchAIError, builtins.TimeoutError):
    """A blocking call passed its ``timeout``."""

    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        super().__init__(f"timed out after {timeout:g}s waiting for {what}")


TimeoutError = BatchAITimeoutError  # batchai_sdk.TimeoutError is also a builtins.TimeoutError


class NodeError(BatchAIError):
    """Nodes failed an operation. ``failures`` maps node → reason; ``succeeded`` lists the rest.
    ``summary`` replaces the message's opening ("<operation> failed on N node(s)")."""

    def __init__(
        self,
        operation: str,
        failures: dict[str, str],
        succeeded: list[str] | None = None,
        *,
        summary: str | None = None,
    ) -> None:
        self.operation = operation
        self.failures = failures
        self.succeeded = succeeded or []
        detail = "; ".join(f"{node}: {why}" for node, why in failures.items())
        count = len(failures)
        opening = summary or f"{operation} failed on {count} node{'' if count == 1 else 's'}"
        super().__init__(f"{opening}: {detail}")


class UnhealthyNodesError(NodeError):
    """Too few of the cluster's nodes passed the health gate for the job: ``failures`` maps each node kept
    out to its failed checks (``node-1 allreduce busbw=212.3GB/s < 400 FAIL``)."""

    def __init__(self, needed: int, failures: dict[str, str], healthy: list[str]) -> None:
        self.needed = needed
        super().__init__(
            f"the job needs {needed} healthy node(s), {len(healthy)} passed the health gate; placing it",
            failures,
            healthy,
        )


class HostKeyError(BatchAIError):
    """A node's SSH host key is unknown (and trust on first use is off) or has changed."""

    def __init__(self, host: str, reason: str, fingerprint: str | None = None) -> None:
        self.host = host
        self.reason = reason
        self.fingerprint = fingerprint
        fp = f" (key {fingerprint})" if fingerprint else ""
        super().__init__(f"host key for {host} refused: {reason}{fp}")


class BackendError(BatchAIError):
    """A backend (SSH, Azure) failed; ``code`` carries the backend's own error code when there is one."""

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None) -> None:
        self.code = code
        self.status = status
        super().__init__(message)


class ProtocolMismatchError(BackendError):
    """The cluster's scheduler speaks another version of the wire than this client (``node/protocol``'s
    ``PROTOCOL``): ``ours``, ``theirs`` (None: a scheduler too old to say) and its ``pid`` on the head node.
    Nothing was sent to it beyond the ping; let its jobs end and stop it, or use the matching batchai_sdk."""

    def __init__(self, cluster: str, *, ours: int, theirs: int | None, pid: int | None) -> None:
        self.cluster = cluster
        self.ours = ours
        self.theirs = theirs
        self.pid = pid
        spoken = "an older protocol that does not say its number" if theirs is None else f"protocol {theirs}"
        super().__init__(
            f"the scheduler of cluster {cluster!r} (pid {pid} on its head node) speaks {spoken}; this "
            f"batchai_sdk speaks protocol {ours}: let its jobs end and stop that process (it starts again "
            "with the next submit), or use the batchai_sdk version that started it",
            code="protocol_mismatch",
        )


class SSHError(BackendError):
    """An SSH connection or command channel failed.

    ``host`` names the machine (``host:port``); ``code`` says how: ``unreachable`` (no TCP connection / no
    SSH server), ``auth`` (the key was not accepted), ``protocol`` (the SSH session broke), ``start`` (a
    detached start did not start). ``try_command`` is the ``ssh`` command line that reproduces the
    connection by hand (key file, port, user@host), where it is known; the message ends with it.
    """

    def __init__(self, host: str, message: str, *, code: str, try_command: str | None = None) -> None:
        self.host = host
        self.try_command = try_command
        tried = f" (try it by hand: {try_command})" if try_command else ""
        super().__init__(f"ssh {host}: {message}{tried}", code=code)


class SSHAuthenticationError(SSHError):
    """The node refused the key: ``user``, ``key_file`` and ``host`` say which login failed."""

    def __init__(self, host: str, *, user: str | None, key_file: str | None, detail: str, try_command: str):
        self.user = user
        self.key_file = key_file
        key = f"the key {key_file}" if key_file else "no key file (agent and ~/.ssh keys)"
        super().__init__(
            host,
            f"{key} was not accepted for user {user!r} ({detail}): is its public key in that user's "
            "~/.ssh/authorized_keys on the node?",
            code="auth",
            try_command=try_command,
        )


class AzureError(BackendError):
    """An Azure operation failed; ``code`` is the ARM/Storage error code (e.g. QuotaExceeded)."""


class AzureQuotaError(AzureError):
    """Quota, VM size (SKU) or capacity refused the request; ``hint`` says what to change."""

    def __init__(self, message: str, *, code: str | None, status: int | None, hint: str) -> None:
        self.hint = hint
        super().__init__(message, code=code, status=status)


class ShareError(BatchAIError):
    """A file share operation failed (missing file, permission, transport)."""

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class BatchAIJsonError(ValidationError):
    """A job.json is malformed: ``field`` is the JSON path (e.g. ``properties.nodeCount``)."""


class BatchAIJsonWarning(UserWarning):
    """A Batch AI JSON file has fields that change nothing here (read-only, or of an older API)."""


class MissingExtraError(BatchAIError, ImportError):
    """An optional dependency is not installed: ``package``, and ``extra``, the ``pip install
    'batchai_sdk[extra]'`` that brings it."""

    def __init__(self, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(f"{package} is not installed; install it with: pip install 'batchai_sdk[{extra}]'")


class SlurmError(BackendError):
    """A Slurm command failed on the login node; ``command`` names it, ``stderr`` is Slurm's own message.

    ``code``: ``missing`` (the command is not installed there), ``partition`` or ``account`` (Slurm does
    not know it), ``rejected`` (sbatch refused the request), ``failed`` (anything else).
    """

    def __init__(self, command: str, message: str, *, code: str, stderr: str = "") -> None:
        self.command = command
        self.stderr = stderr
        super().__init__(f"{command}: {message}", code=code)


class SlurmCommandNotFoundError(SlurmError):
    """``sbatch``/``squeue``/... is not installed (or not on PATH) where the SDK runs Slurm's commands."""

    def __init__(self, command: str, host: str) -> None:
        self.host = host
        super().__init__(
            command,
            f"not found on {host}; install Slurm's client commands there or point login_host at a login node",
            code="missing",
        )


class SlurmRejectedError(SlurmError):
    """Slurm refused a request (an unknown partition or account, an impossible resource request)."""


class NotSupportedError(BatchAIError):
    """The backend does not do this operation; ``hint`` says what does."""

    def __init__(self, operation: str, backend: str, hint: str) -> None:
        self.operation = operation
        self.backend = backend
        self.hint = hint
        super().__init__(f"{operation} is not supported by the {backend} backend: {hint}")


class SweepDrivenError(BatchAIError):
    """Another process drives the sweep (``Sweep.run``): one driver at a time. ``driver`` says who (host,
    pid, since when, last heard from)."""

    def __init__(self, sweep: str, driver: str, hint: str) -> None:
        self.sweep = sweep
        self.driver = driver
        self.hint = hint
        super().__init__(f"sweep {sweep!r} is driven by {driver}: {hint}")


class FaultInjectionRefusedError(BatchAIError):
    """The job's cluster does not allow fault drills (``allow_fault_injection`` is off)."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        super().__init__(
            f"fault injection is off on cluster {cluster!r}: drills kill, stop and take away its nodes' "
            "processes; create the cluster with allow_fault_injection=True where that is wanted"
        )
