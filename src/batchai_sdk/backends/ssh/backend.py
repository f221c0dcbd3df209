"""Machines you bring, reached by SSH: a lab cluster, existing VMs.

Every host sees the workspace share at ``share_path`` (an NFS/SMB mount, or it is one machine); the
client sees it through SFTP on the first host. A cluster is the first ``nodes`` hosts; its head node is
the first. Before a job, every node of it must answer over SSH (host keys pinned), and node setup runs
once per node: the cluster's key pair so that mpirun on the head node reaches the others with strict
host key checking, then the cluster's own ``node_setup`` command.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ... import _layout as layout
from ..._models import ClusterSpec, Node, NodeState, utcnow
from ...exceptions import BackendError, BatchAIError, HostKeyError, NodeError, ValidationError
from ...mounts import AzureBlobContainer, AzureFileShare, Mount, storage_key
from ...remote.base import BorrowedRunner, CommandResult, Runner
from ...remote.fanout import fan_out
from ...remote.host_keys import HostKeyStore, known_hosts_name
from ...remote.ssh import SSHRunner, probe_ssh
from ...share import join
from ..base import Backend, ClusterStatus, LaunchTarget
from ..local import default_root
from . import cluster_secrets
from . import keys as ssh_keys
from . import mounts as ssh_mounts
from . import node_setup as setup
from .share import SFTPShare

log = logging.getLogger(__name__)

_HOST_RE = re.compile(r"^[A-Za-z0-9_.:%\[\]-]+$")


def node_id(host: str) -> str:
    """A node id for log names (``execution-<id>.log``): the host with anything odd made ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", host)


def parse_jump(spec: str, default_user: str) -> tuple[str, str, int]:
    """``[user@]host[:port]`` → (user, host, port)."""
    user, _, rest = spec.rpartition("@")
    host, port = rest, 22
    if rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
        if not port_text.isdigit():
            raise ValidationError("jump_host", spec, "'[user@]host[:port]'")
        port = int(port_text)
    if not host or not _HOST_RE.match(host):
        raise ValidationError("jump_host", spec, "'[user@]host[:port]'")
    return user or default_user, host, port


class SSHBackend(Backend):
    kind = "ssh"

    def __init__(
        self,
        name: str,
        *,
        hosts: Sequence[str],
        user: str,
        key_file: str | os.PathLike[str] | None,
        share_path: str,
        port: int = 22,
        known_hosts: str | os.PathLike[str] | None = None,
        trust_on_first_use: bool = False,
        jump_host: str | None = None,
        python: str = "python3",
        mpirun: str = "mpirun",
        state_dir: str | os.PathLike[str] | None = None,
        node_state_dir: str = "~/.batchai",
        authorized_keys_path: str = "~/.ssh/authorized_keys",
        tcp_interface: str | None = None,
        mpi_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        connect_kwargs: Mapping[str, Any] | None = None,
        connect_timeout: float = 10.0,
        retries: int = 3,
        probe_timeout: float = 3.0,
        setup_timeout: float = 3600.0,
        keepalive: float = 15.0,
        io_timeout: float = 30.0,
    ) -> None:
        if isinstance(hosts, str) or not hosts:
            raise ValidationError("hosts", hosts, "a non-empty list of host names or addresses")
        for i, host in enumerate(hosts):
            if not isinstance(host, str) or not _HOST_RE.match(host):
                raise ValidationError(f"hosts[{i}]", host, "a host name or an IP address")
        if not isinstance(user, str) or not user or not re.match(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$", user):
            raise ValidationError("user", user, "a user name on the hosts")
        if not isinstance(share_path, str) or not share_path.startswith("/") or share_path.rstrip("/") == "":
            raise ValidationError("share_path", share_path, "an absolute path below / on every host")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValidationError("port", port, "a TCP port 1-65535")
        for field_name, path in (("node_state_dir", node_state_dir), ("share_path", share_path)):
            if re.search(r"\s", path):
                # mpirun splits its rsh agent option on whitespace
                raise ValidationError(field_name, path, "a path without whitespace")
        if not (node_state_dir.startswith("/") or node_state_dir == "~" or node_state_dir.startswith("~/")):
            raise ValidationError("node_state_dir", node_state_dir, "an absolute path or one under ~/")
        self.workspace = name
        self.hosts = list(hosts)
        self.user = user
        self.port = port
        self.key_file = os.path.expanduser(os.fspath(key_file)) if key_file is not None else None
        if self.key_file is not None and not os.path.isfile(self.key_file):
            # before any connection: paramiko would retry, then blame the host
            raise ValidationError(
                "key_file",
                os.fspath(key_file),  # type: ignore[arg-type]
                "an existing private key file on this machine (make one: ssh-keygen -t ed25519 -f PATH)",
            )
        self.share_path = posixpath.normpath(share_path)
        self.python = python
        self.mpirun = mpirun
        self.node_state_dir = node_state_dir
        self.authorized_keys_path = authorized_keys_path
        self.tcp_interface = tcp_interface
        self.extra_mpi_args = tuple(mpi_args)
        self.env = dict(env or {})
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.probe_timeout = probe_timeout
        self.setup_timeout = setup_timeout
        self.keepalive = keepalive
        self.io_timeout = io_timeout
        self.connect_kwargs = dict(connect_kwargs or {})
        self.state_dir = (
            Path(state_dir).expanduser() if state_dir is not None else default_root() / "ssh" / name
        )
        self.host_keys = HostKeyStore(
            Path(known_hosts).expanduser() if known_hosts is not None else self.state_dir / "known_hosts",
            trust_on_first_use=trust_on_first_use,
        )
        self._lock = threading.RLock()
        self._runners: dict[str, SSHRunner] = {}
        self._jump: SSHRunner | None = None
        if jump_host is not None:
            jump_user, jump_addr, jump_port = parse_jump(jump_host, user)
            self._jump = self._make_runner(jump_addr, user=jump_user, port=jump_port, jump=None)
        self._node_dir: str | None = None
        self._gpus: dict[str, int] = {}
        self.share = SFTPShare(
            self._runner(self.hosts[0]),
            self.share_path,
            others=lambda: [self._runner(h) for h in dict.fromkeys(self.hosts)],
        )

    def check_share_path(self) -> None:
        """Refuse a ``share_path`` that is not a folder on the head node (connecting to it): a mistyped
        one is never made, since a new empty folder would hide the real share. ``Workspace.ssh`` calls it;
        the constructor itself makes no connection."""
        info = self.share.stat("")
        if info is None or not info.is_dir:
            what = "is not a folder" if info is not None else "does not exist"
            raise ValidationError(
                "share_path",
                self.share_path,
                f"a folder every host sees; {self.share_path} {what} on {self.user}@{self.hosts[0]} "
                f"(mount the shared file system there, or create it: "
                f"{self._runner(self.hosts[0]).try_command} mkdir -p {self.share_path})",
            )

    def __repr__(self) -> str:
        return f"SSHBackend({self.workspace!r}, hosts={self.hosts!r}, share_path={self.share_path!r})"

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "hosts": list(self.hosts),
            "user": self.user,
            "port": self.port,
            "share_path": self.share_path,
            "known_hosts": str(self.host_keys.path),
            "trust_on_first_use": self.host_keys.trust_on_first_use,
            "jump_host": self._jump.host if self._jump is not None else None,
        }

    # -- runners --------------------------------------------------------------------------------------
    def _make_runner(self, host: str, *, user: str, port: int, jump: SSHRunner | None) -> SSHRunner:
        return SSHRunner(
            host,
            host_keys=self.host_keys,
            user=user,
            port=port,
            key_file=self.key_file,
            node=node_id(host),
            jump=jump,
            connect_timeout=self.connect_timeout,
            retries=self.retries,
            keepalive=self.keepalive,
            io_timeout=self.io_timeout,
            connect_kwargs=self.connect_kwargs,
        )

    def _runner(self, host: str) -> SSHRunner:
        with self._lock:
            runner = self._runners.get(host)
            if runner is None:
                runner = self._make_runner(host, user=self.user, port=self.port, jump=self._jump)
                self._runners[host] = runner
            return runner

    def runner(self, node: Node) -> SSHRunner:
        """The backend's (shared) runner on ``node``."""
        return self._runner(node.address)

    def close(self) -> None:
        with self._lock:
            for runner in self._runners.values():
                runner.close()
            if self._jump is not None:
                self._jump.close()

    # -- nodes ----------------------------------------------------------------------------------------
    def _nodes(self, count: int) -> tuple[Node, ...]:
        seen: dict[str, int] = {}
        out = []
        for host in self.hosts[:count]:
            base = node_id(host)
            seen[base] = seen.get(base, 0) + 1
            nid = base if seen[base] == 1 else f"{base}_{seen[base] - 1}"
            out.append(Node(id=nid, address=host, machine=host))
        return tuple(out)

    def _check_size(self, nodes: int) -> None:
        if nodes > len(self.hosts):
            raise ValidationError(
                "nodes",
                nodes,
                f"at most {len(self.hosts)}, the number of hosts of workspace {self.workspace!r}",
            )

    def create_cluster(self, spec: ClusterSpec, *, timeout: float | None = None) -> None:
        self._check_size(spec.nodes)
        save_cluster_secrets(self._client_key_path(spec.name).parent, spec)

    def resize_cluster(self, spec: ClusterSpec, nodes: int, *, timeout: float | None = None) -> None:
        self._check_size(nodes)

    def cluster_status(self, spec: ClusterSpec) -> ClusterStatus:
        """The cluster's hosts; those where no SSH server answers quickly are unusable."""
        nodes = self._nodes(spec.nodes)
        probes = fan_out({n.id: n for n in nodes}, self._probe)
        reasons = {nid: why for nid, why in probes.succeeded.items() if why is not None}
        return ClusterStatus(
            resizing=False,
            nodes=nodes,
            node_states={nid: NodeState.UNUSABLE for nid in reasons},
            reasons=reasons,
        )

    def _probe(self, node: Node) -> str | None:
        """None when ``node`` answers: it runs a command over the open connection, else (no connection,
        or a stale one, which ``check`` drops) its SSH server answers a quick look."""
        runner = self.runner(node)
        if runner.connected and runner.check(timeout=self.probe_timeout) is None:
            return None
        why = probe_ssh(node.address, self.port, timeout=self.probe_timeout, via=self._jump)
        return f"{why} (try it by hand: {runner.try_command})" if why else None

    # -- node-local paths -----------------------------------------------------------------------------
    def node_dir(self) -> str:
        """``node_state_dir`` made absolute with the head node's $HOME (mpirun needs one path that is
        valid on every node)."""
        with self._lock:
            if self._node_dir is None:
                raw = self.node_state_dir
                if raw.startswith("~"):
                    result = self._runner(self.hosts[0]).run(
                        'printf %s "$HOME"', timeout=self.connect_timeout
                    )
                    home = result.stdout.strip()
                    if not result.ok or not home.startswith("/") or re.search(r"\s", home):
                        raise NodeError(
                            "resolving the home directory",
                            {node_id(self.hosts[0]): result.describe() if not result.ok else repr(home)},
                        )
                    raw = home + raw[1:]
                self._node_dir = posixpath.normpath(raw)
            return self._node_dir

    def node_paths(self, cluster: str) -> setup.NodePaths:
        return setup.NodePaths(posixpath.join(self.node_dir(), "clusters", cluster))

    def setup_dir(self, cluster: str) -> str:
        """Share-relative directory of node setup markers and logs."""
        return join(layout.SHARE.cluster_dir(cluster), "setup")

    def cluster_key_comment(self, cluster: str) -> str:
        """Names the cluster's line in authorized_keys; an older key with it is replaced."""
        return f"batchai-cluster:{self.workspace}/{cluster}:{self.share_path}"

    def _client_key_path(self, cluster: str) -> Path:
        return self.state_dir / "clusters" / cluster / "id_ed25519"

    def cluster_key(self, cluster: str, hosts: Sequence[str] | None = None) -> ssh_keys.ClusterKey:
        """The cluster's key pair: kept on this client; else taken back from the first of ``hosts`` (the
        nodes that answered; default: the workspace's hosts) where an earlier setup (maybe from another
        client) installed it; else generated. A node that does not answer is skipped, and with none of
        those that answer holding the key while one did not answer, BackendError: a new key would lock the
        silent node's scheduler out of the others once it came back."""
        with self._lock:
            path = self._client_key_path(cluster)
            comment = self.cluster_key_comment(cluster)
            key = ssh_keys.load(path, comment)
            if key is not None:
                return key
            silent: list[str] = []
            for host in dict.fromkeys(hosts or self.hosts):
                try:
                    with self._runner(host).sftp().open(self.node_paths(cluster).key, "r") as f:
                        text = f.read().decode("ascii")
                except FileNotFoundError:
                    continue  # this node was never set up for the cluster
                except (OSError, BatchAIError) as exc:
                    silent.append(f"{host} ({exc})")
                    continue
                except UnicodeDecodeError:
                    continue
                try:
                    key = ssh_keys.parse(text, comment)
                except (ValueError, BatchAIError):
                    continue  # a damaged copy: another node's, else a new key
                ssh_keys.save(path, key)
                return key
            if silent:
                raise BackendError(
                    f"cannot take cluster {cluster!r}'s key back from its nodes: {'; '.join(silent)}"
                )
            key = ssh_keys.generate(comment)
            ssh_keys.save(path, key)
            return key

    def setup_secrets(self, spec: ClusterSpec) -> dict[str, str]:
        """The values of the cluster's ``node_setup_secrets``: given with the spec, else kept on this
        client, else read back from the head node (where an earlier setup, maybe from another client,
        left them); BackendError naming the missing names (never a value) when none has them."""
        names = set(spec.node_setup_secret_names)
        if not names:
            return {}
        if names <= set(spec.node_setup_secrets):
            return dict(spec.node_setup_secrets)
        folder = self._client_key_path(spec.name).parent
        with self._lock:
            found = cluster_secrets.load(folder)
            if found is None:
                try:
                    path = self.node_paths(spec.name).secrets
                    with self._runner(self.hosts[0]).sftp().open(path, "r") as f:
                        found = cluster_secrets.parse_env(f.read().decode("utf-8"))
                except (OSError, UnicodeDecodeError, BatchAIError):
                    found = {}
                if names <= set(found):
                    cluster_secrets.save(folder, found)
        missing = sorted(names - set(found))
        if missing:
            raise BackendError(
                f"the values of node_setup_secrets {', '.join(missing)} of cluster {spec.name!r} are "
                "neither on this client nor on its head node: delete the cluster and create it again "
                "with them"
            )
        return {k: found[k] for k in sorted(names)}

    # -- preparing nodes for a job --------------------------------------------------------------------
    def prepare(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> None:
        """Every node answers over SSH (else NodeError naming it), sees the share, and has run node
        setup; setup runs only where the node's marker does not hold the current setup's hash."""
        by_id = {n.id: n for n in nodes}
        connected = fan_out(by_id, lambda n: self.runner(n).connect())
        failures = connected.failed
        host_key = next((e for _, e in sorted(failures.items()) if isinstance(e, HostKeyError)), None)
        if host_key is not None:
            raise host_key
        connected.raise_on_failure("connecting to the cluster's nodes")
        paths = self.node_paths(spec.name)
        key = self.cluster_key(spec.name, [n.address for n in nodes] + list(self.hosts))
        # every node of the cluster the client has pinned, so later jobs on other nodes need no refresh
        addresses = [n.address for n in self._nodes(spec.nodes)] + [n.address for n in nodes]
        cluster_names = [known_hosts_name(a, self.port) for a in dict.fromkeys(addresses)]
        config = setup.ssh_config_text(
            paths, user=self.user, port=self.port, connect_timeout=self.connect_timeout
        )
        known = self.host_keys.known_hosts_text(cluster_names)
        want = setup.setup_hash(
            public_key=key.public_line,
            node_setup=spec.node_setup,
            authorized_keys=self.authorized_keys_path,
            cluster_dir=paths.cluster_dir,
            secret_names=spec.node_setup_secret_names,
        )
        share_marker = posixpath.join(self.share_path, layout.META)
        share_checked = self.share.exists(layout.META)
        refresh = {
            n.id: setup.refresh_script(
                paths, n.id, ssh_config=config, known_hosts=known, share_marker=share_marker
            )
            for n in nodes
        }
        facts = fan_out(by_id, lambda n: self.runner(n).run(refresh[n.id], timeout=self.connect_timeout + 60))
        facts.raise_on_failure("checking the cluster's nodes")
        parsed = {nid: setup.parse_refresh(r.stdout) for nid, r in facts.succeeded.items()}
        if share_checked:
            blind = {
                nid: f"the share is not visible at {self.share_path} (is it mounted on this node?)"
                for nid, p in parsed.items()
                if p.get("share") != "1"
            }
            if blind:
                raise NodeError(
                    "checking the share on the cluster's nodes", blind, sorted(set(by_id) - set(blind))
                )
        for nid, p in parsed.items():
            gpus = p.get("gpus", "0")
            self._gpus[by_id[nid].address] = int(gpus) if gpus.isdigit() else 0
        todo = {nid: n for nid, n in by_id.items() if parsed[nid].get("hash") != want}
        if todo:
            self._setup(spec, todo, key, paths, want)
        root = posixpath.dirname(self.share_path)
        keys = cluster_secrets.load(self._client_key_path(spec.name).parent, name=cluster_secrets.MOUNT_KEYS)
        points = [
            ssh_mounts.MountPoint(with_key(m, keys or {}), posixpath.join(root, m.relative_mount_path))
            for m in spec.mounts
        ]
        self._mount(by_id, points, f"the mounts of cluster {spec.name!r}")

    def prepare_job_mounts(self, spec: ClusterSpec, nodes: tuple[Node, ...], mounts: Sequence[Mount]) -> None:
        """A job's mounts of storage the cluster does not mount: mounted (or checked) on every node of the
        job under the node-local storage root, where the rank shim links them."""
        declared = {storage_key(m) for m in spec.mounts}
        points = [
            ssh_mounts.MountPoint(m, posixpath.join(self.storage_root(), storage_key(m)))
            for m in mounts
            if storage_key(m) not in declared
        ]
        self._mount({n.id: n for n in nodes}, points, "the job's mounts")

    def storage_root(self) -> str:
        """Node-local: where a job's own mounts are mounted, one folder per storage (mounts.storage_key)."""
        return posixpath.join(self.node_dir(), "storage")

    def _mount(self, by_id: Mapping[str, Node], points: list[ssh_mounts.MountPoint], what: str) -> None:
        """Mount ``points`` on every node, or check they are there; NodeError naming node and path."""
        if not points:
            return
        secrets_dir = posixpath.join(self.node_dir(), "mount-secrets")
        script, stdin = ssh_mounts.mount_script(points, secrets_dir=secrets_dir)
        mounted = fan_out(
            by_id, lambda n: self.runner(n).run(script, stdin=stdin, timeout=self.setup_timeout)
        )
        failures = mounted.reasons()
        missing = {
            nid: ssh_mounts.parse_report(r.stdout, points) for nid, r in mounted.succeeded.items() if r.ok
        }
        failures.update(ssh_mounts.describe_missing({nid: m for nid, m in missing.items() if m}))
        if failures:
            raise NodeError(
                f"mounting {what}", dict(sorted(failures.items())), sorted(set(by_id) - set(failures))
            )

    def _setup(
        self,
        spec: ClusterSpec,
        nodes: dict[str, Node],
        key: ssh_keys.ClusterKey,
        paths: setup.NodePaths,
        want: str,
    ) -> None:
        # first, so that a cluster whose secrets cannot be found leaves no setup record "running"
        secrets = self.setup_secrets(spec)
        stdin = key.private_openssh + cluster_secrets.env_text(secrets)  # never on a command line
        setup_dir = self.setup_dir(spec.name)
        log_dir = posixpath.join(self.share_path, setup_dir)
        self.share.mkdir(setup_dir)
        env = {"AZ_BATCHAI_MOUNT_ROOT": posixpath.dirname(self.share_path)}
        started = utcnow().isoformat()
        for nid in nodes:
            self.share.write_json(
                join(setup_dir, f"{nid}.json"), {"node": nid, "state": "running", "started": started}
            )
        log.info("node setup of cluster %s on %s", spec.name, ", ".join(sorted(nodes)))

        def one(node: Node) -> CommandResult:
            script = setup.setup_script(
                paths,
                node.id,
                public_key=key.public_line,
                authorized_keys=self.authorized_keys_path,
                node_setup=spec.node_setup,
                log_dir=log_dir,
                setup_hash=want,
                env=env,
                secrets=bool(secrets),
            )
            return self.runner(node).run(script, stdin=stdin, timeout=self.setup_timeout)

        done = fan_out(nodes, one)
        failures = done.reasons()
        ended = utcnow().isoformat()
        for nid in nodes:
            res = done.succeeded.get(nid)
            self.share.write_json(
                join(setup_dir, f"{nid}.json"),
                {
                    "node": nid,
                    "state": "failed" if nid in failures else "succeeded",
                    "hash": want,
                    "started": started,
                    "ended": ended,
                    "exit_code": res.exit_code if res is not None else None,
                    "failure_reason": failures.get(nid),
                },
            )
        if failures:
            raise NodeError(
                f"node setup of cluster {spec.name!r} (logs in {setup_dir}/)",
                dict(sorted(failures.items())),
                sorted(set(nodes) - set(failures)),
            )

    # -- launching ------------------------------------------------------------------------------------
    def launch_target(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> LaunchTarget:
        paths = self.node_paths(spec.name)
        rsh = f"ssh -F {paths.ssh_config}"
        mpi_args: list[str] = ["--mca", "plm_rsh_agent", rsh, "--mca", "btl", "self,tcp"]
        if self.tcp_interface:
            mpi_args += [
                "--mca",
                "btl_tcp_if_include",
                self.tcp_interface,
                "--mca",
                "oob_tcp_if_include",
                self.tcp_interface,
            ]
        mpi_args += self.extra_mpi_args
        return LaunchTarget(
            nodes=nodes,
            node_share_root=self.share_path,
            mount_root=posixpath.dirname(self.share_path),
            temp_root=posixpath.join(self.node_dir(), "tmp"),
            python=self.python,
            mpirun=self.mpirun,
            ssh_command=("ssh", "-F", paths.ssh_config),
            mpi_args=tuple(mpi_args),
            env=dict(self.env),
            num_gpus=self._gpus.get(nodes[0].address, 0) if nodes else 0,
            oversubscribe=False,
            storage_root=self.storage_root(),
        )

    def head_runner(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> Runner:
        return BorrowedRunner(self.runner(nodes[0]))

    def head_node(self, spec: ClusterSpec) -> Node | None:
        """The first host: the head while it answers (when it does not, cluster_status names the next)."""
        return self._nodes(1)[0] if self.hosts else None

    # -- removal --------------------------------------------------------------------------------------
    def delete_cluster(self, spec: ClusterSpec) -> None:
        """Remove the cluster's key from the hosts that answer (node-local files and authorized_keys),
        its setup records and this client's copy of its key. Hosts that do not answer keep theirs."""
        try:
            paths = self.node_paths(spec.name)
        except BatchAIError as exc:
            log.warning("cluster %s: the hosts are not reachable, their files stay: %s", spec.name, exc)
        else:
            script = setup.cleanup_script(
                paths,
                authorized_keys=self.authorized_keys_path,
                key_comment=self.cluster_key_comment(spec.name),
            )
            hosts = {node_id(h): Node(id=node_id(h), address=h, machine=h) for h in dict.fromkeys(self.hosts)}
            cleaned = fan_out(hosts, lambda n: self.runner(n).run(script, timeout=self.connect_timeout + 30))
            for nid, error in cleaned.failed.items():
                log.warning("cluster %s: could not clean up node %s: %s", spec.name, nid, error)
        self.share.delete(self.setup_dir(spec.name), recursive=True)
        client_dir = self._client_key_path(spec.name).parent
        for f in (client_dir / "id_ed25519", client_dir / "id_ed25519.pub"):
            f.unlink(missing_ok=True)
        cluster_secrets.remove(client_dir)
        try:
            client_dir.rmdir()
        except OSError:
            pass


def save_cluster_secrets(folder: Path, spec: ClusterSpec) -> None:
    """The cluster's setup secrets and its mounts' keys, to the client's secrets place (``folder``)."""
    if spec.node_setup_secrets:
        cluster_secrets.save(folder, spec.node_setup_secrets)
    keys = {
        m.relative_mount_path: m.account_key
        for m in spec.mounts
        if isinstance(m, AzureFileShare | AzureBlobContainer) and m.account_key is not None
    }
    if keys:
        cluster_secrets.save(folder, keys, name=cluster_secrets.MOUNT_KEYS)


def with_key(mount: Mount, keys: Mapping[str, str]) -> Mount:
    """``mount`` with the key kept for it on this client, where it came without one (from the record)."""
    key = keys.get(mount.relative_mount_path)
    if isinstance(mount, AzureFileShare | AzureBlobContainer) and mount.account_key is None and key:
        return dataclasses.replace(mount, account_key=key)
    return mount
