"""Pure builders of the shell scripts the SSH backend runs on its nodes (no I/O here).

Per cluster, on every node, in a node-local directory ``<node_dir>/clusters/<cluster>/``:

- ``ssh_config`` and ``known_hosts``: how mpirun and the job wrapper on the head node reach the other
  nodes — the cluster key, the port, and the host keys the client pinned (checked strictly, never
  disabled). Refreshed by ``refresh_script`` before every job, written only when they changed.
- ``id_ed25519``: the cluster's private key (0600), its public half appended once to the node's
  authorized_keys, then the cluster's own ``node_setup`` command — ``setup_script``, run when the
  node's ``setup-<node>.sha256`` marker does not hold the current setup's hash.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from dataclasses import dataclass

from . import cluster_secrets

SETUP_VERSION = 1


@dataclass(frozen=True)
class NodePaths:
    """Node-local files of one cluster (absolute paths, the same on every node)."""

    cluster_dir: str

    @property
    def key(self) -> str:
        return posixpath.join(self.cluster_dir, "id_ed25519")

    @property
    def ssh_config(self) -> str:
        return posixpath.join(self.cluster_dir, "ssh_config")

    @property
    def known_hosts(self) -> str:
        return posixpath.join(self.cluster_dir, "known_hosts")

    @property
    def secrets(self) -> str:
        """The setup task's secrets (``export`` lines, 0600), sourced only by ``node_setup``'s subshell."""
        return posixpath.join(self.cluster_dir, cluster_secrets.NODE_FILE)

    def marker(self, node: str) -> str:
        return posixpath.join(self.cluster_dir, f"setup-{node}.sha256")


MUX_DIR = ".batchai-ssh"  # in the user's home on each node, 0700: the cluster's shared SSH connections
MUX_PERSIST_S = 120


def ssh_config_text(paths: NodePaths, *, user: str, port: int, connect_timeout: float = 10) -> str:
    """The nodes' ssh configuration. Connections are shared (ControlMaster): the scheduler, launchers and
    mpirun reuse one connection per node for ``MUX_PERSIST_S`` seconds instead of a handshake per command,
    through a socket in a private folder of the home directory (a short path, as Unix sockets need)
    named per cluster, so clusters never share one."""
    mux = hashlib.sha256(paths.cluster_dir.encode()).hexdigest()[:8]
    return "\n".join(
        [
            "# written by batchai_sdk: how the cluster's nodes reach each other (ssh -F <this file>)",
            "Host *",
            "    ControlMaster auto",
            f"    ControlPath %d/{MUX_DIR}/{mux}-%C",
            f"    ControlPersist {MUX_PERSIST_S}",
            f"    Port {port}",
            f"    User {user}",
            f"    IdentityFile {paths.key}",
            "    IdentitiesOnly yes",
            f"    UserKnownHostsFile {paths.known_hosts}",
            "    GlobalKnownHostsFile /dev/null",
            "    StrictHostKeyChecking yes",
            "    BatchMode yes",
            f"    ConnectTimeout {max(1, int(connect_timeout))}",
            # a node that goes silent (partition, power loss) ends mpirun's connection to it in about
            # 20 s, not the minute of 15 s x 3 (and then mpirun ends the job and it is named)
            "    ServerAliveInterval 5",
            "    ServerAliveCountMax 3",
            "    LogLevel ERROR",
            "",
        ]
    )


def setup_hash(
    *,
    public_key: str,
    node_setup: str | None,
    authorized_keys: str,
    cluster_dir: str,
    secret_names: tuple[str, ...] = (),
) -> str:
    """What node setup depends on: when it changes, setup runs again on every node (secrets by name)."""
    facts: dict[str, object] = {
        "version": SETUP_VERSION,
        "public_key": public_key,
        "node_setup": node_setup,
        "authorized_keys": authorized_keys,
        "cluster_dir": cluster_dir,
    }
    if secret_names:  # only then: the hash of a cluster without secrets stays what it was
        facts["secret_names"] = sorted(secret_names)
    data = json.dumps(facts, sort_keys=True)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def home_path(path: str) -> str:
    """A shell word for ``path`` where a leading ``~/`` means the node's $HOME."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


_PUT = (
    'put() { if [ "$(cat "$1" 2>/dev/null)" != "$2" ]; then '
    'printf \'%s\\n\' "$2" > "$1.$$" && mv -f "$1.$$" "$1"; fi; }'
)


def refresh_script(
    paths: NodePaths, node: str, *, ssh_config: str, known_hosts: str, share_marker: str
) -> str:
    """Writes ssh_config/known_hosts when they changed; prints ``hash=``, ``share=`` and ``gpus=``.

    ``share_marker`` is a path that exists on the share: ``share=0`` means this node does not see it.
    """
    q = shlex.quote
    return "\n".join(
        [
            "umask 077",
            f"mkdir -p {q(paths.cluster_dir)} || exit 1",
            f'mkdir -p "$HOME/{MUX_DIR}" && chmod 700 "$HOME/{MUX_DIR}" || exit 1',
            _PUT,
            f"put {q(paths.ssh_config)} {q(ssh_config.rstrip(chr(10)))} || exit 1",
            f"put {q(paths.known_hosts)} {q(known_hosts.rstrip(chr(10)))} || exit 1",
            f"printf 'hash=%s\\n' \"$(cat {q(paths.marker(node))} 2>/dev/null)\"",
            f"if [ -e {q(share_marker)} ]; then echo share=1; else echo share=0; fi",
            "printf 'gpus=%s\\n' \"$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')\"",
        ]
    )


def parse_refresh(stdout: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


# sh -c <this> sh AUTHORIZED_KEYS PUBLIC_LINE COMMENT: drop the lines that end with " COMMENT" but are not
# PUBLIC_LINE (an older key of the same cluster); rewritten only when there is such a line.
_AWK_ENDS = (
    "function ends(s, c) { return length(s) >= length(c) && substr(s, length(s) - length(c) + 1) == c } "
)
_STALE = f"'{_AWK_ENDS}$0 != p && ends($0, c) {{ f = 1 }} END {{ exit !f }}'"
_KEEP = f"'{_AWK_ENDS}$0 == p || !ends($0, c)'"
_DROP_STALE = (
    'ak="$1"; pub="$2"; c=" $3"; '
    f'if awk -v c="$c" -v p="$pub" {_STALE} "$ak"; '
    f'then awk -v c="$c" -v p="$pub" {_KEEP} "$ak" > "$ak.$$" && cat "$ak.$$" > "$ak"; rm -f "$ak.$$"; fi'
)
# ... then append PUBLIC_LINE unless it is there.
_AUTHORIZE = (
    'mkdir -p "$(dirname "$1")" && touch "$1" || exit 1\n'
    + _DROP_STALE
    + '\ngrep -qxF "$2" "$1" || printf \'%s\\n\' "$2" >> "$1"'
)


def setup_script(
    paths: NodePaths,
    node: str,
    *,
    public_key: str,
    authorized_keys: str,
    node_setup: str | None,
    log_dir: str,
    setup_hash: str,
    env: dict[str, str],
    secrets: bool = False,
) -> str:
    """Node setup; reads the cluster's private key on stdin (never on a command line), followed by the
    setup task's secrets (``cluster_secrets.env_text``) when ``secrets``: they go to ``paths.secrets``.

    Its output goes to ``stdout-setup-<node>.txt`` / ``stderr-setup-<node>.txt`` in ``log_dir`` (on the
    share, as the node sees it); on failure the last lines of stderr are repeated on the real stderr.
    """
    q = shlex.quote
    out = posixpath.join(log_dir, f"stdout-setup-{node}.txt")
    err = posixpath.join(log_dir, f"stderr-setup-{node}.txt")
    comment = public_key.split(" ", 2)[2] if public_key.count(" ") >= 2 else ""
    lines = [
        "umask 077",
        f"mkdir -p {q(log_dir)} || {{ echo 'cannot write the setup logs to the share at '{q(log_dir)}"
        "' (is the share mounted on this node?)' >&2; exit 1; }",
        "exec 3>&2",
        f"exec >> {q(out)} 2>> {q(err)}",
        f'echo "node setup of {node} started $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"',
        f"mkdir -p {q(paths.cluster_dir)} && chmod 700 {q(paths.cluster_dir)} || exit 1",
        *(_split_stdin(paths) if secrets else [f"cat > {q(paths.key)}.$$", f"rm -f {q(paths.secrets)}"]),
        f"chmod 600 {q(paths.key)}.$$ && mv -f {q(paths.key)}.$$ {q(paths.key)} "
        f"|| {{ echo 'installing the cluster key failed' >&3; exit 1; }}",
        f"printf '%s\\n' {q(public_key)} > {q(paths.key)}.pub",
        f"ak={home_path(authorized_keys)}",
        # under flock (on the cluster dir) where there is one: several nodes may share a home directory
        "if command -v flock >/dev/null 2>&1; then "
        f'flock {q(paths.cluster_dir)} /bin/sh -c {q(_AUTHORIZE)} sh "$ak" {q(public_key)} {q(comment)}; '
        f'else /bin/sh -c {q(_AUTHORIZE)} sh "$ak" {q(public_key)} {q(comment)}; fi '
        '|| { echo "cannot add the cluster key to $ak" >&3; exit 1; }',
        'echo "cluster key installed; authorized in $ak"',
    ]
    if node_setup:
        exports = " ".join(f"{k}={q(v)}" for k, v in sorted(env.items()))
        lines += [
            f"echo {q('running the cluster node_setup command')}",
            # the secrets are sourced by this subshell only: in node_setup's environment, in no argv
            f'cd "$HOME" && ( {". " + q(paths.secrets) + " && " if secrets else ""}'
            f"exec env {exports} /bin/sh -c {q(node_setup)} )",
            "rc=$?",
            'if [ "$rc" -ne 0 ]; then echo "node_setup exited with code $rc" >&3; '
            f'tail -n 3 {q(err)} >&3; exit "$rc"; fi',
        ]
    lines += [
        f"printf '%s\\n' {q(setup_hash)} > {q(paths.marker(node))}",
        'echo "node setup finished $(date -u +%Y-%m-%dT%H:%M:%SZ)"',
    ]
    return "\n".join(lines)


_KEY_END = "-----END OPENSSH PRIVATE KEY-----"


def _split_stdin(paths: NodePaths) -> list[str]:
    """stdin is the private key, then the secrets' ``export`` lines: each to its 0600 file (umask 077)."""
    q = shlex.quote
    stdin = f"{q(paths.cluster_dir)}/.stdin.$$"
    return [
        f"cat > {stdin} || exit 1",
        f"sed -n '1,/^{_KEY_END}$/p' {stdin} > {q(paths.key)}.$$",
        f"sed '1,/^{_KEY_END}$/d' {stdin} > {q(paths.secrets)}.$$ && chmod 600 {q(paths.secrets)}.$$ "
        f"&& mv -f {q(paths.secrets)}.$$ {q(paths.secrets)} || {{ rm -f {stdin}; exit 1; }}",
        f"rm -f {stdin}",
    ]


def cleanup_script(paths: NodePaths, *, authorized_keys: str, key_comment: str) -> str:
    """Removes the cluster's node-local directory and its key from authorized_keys (best effort)."""
    q = shlex.quote
    return "\n".join(
        [
            f"ak={home_path(authorized_keys)}",
            f'if [ -f "$ak" ]; then /bin/sh -c {q(_DROP_STALE)} sh "$ak" "" {q(key_comment)}; fi',
            f"rm -rf -- {q(paths.cluster_dir)}",
        ]
    )
