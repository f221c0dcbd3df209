"""The node setup scripts, run by a real /bin/sh here (no sshd): files, modes, idempotency, quoting."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

from batchai_sdk.backends.ssh import cluster_secrets
from batchai_sdk.backends.ssh import keys as ssh_keys
from batchai_sdk.backends.ssh import node_setup as setup


def sh(script: str, *, stdin: str = "", home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(home or Path.cwd())}
    return subprocess.run(
        ["/bin/sh", "-c", script], input=stdin, capture_output=True, text=True, env=env, check=False
    )


@pytest.fixture
def paths(tmp_path: Path) -> setup.NodePaths:
    return setup.NodePaths(str(tmp_path / "node" / "clusters" / "c"))


def run_setup(
    paths: setup.NodePaths,
    tmp_path: Path,
    key: ssh_keys.ClusterKey,
    *,
    node_setup: str | None = None,
    node: str = "n0",
) -> subprocess.CompletedProcess[str]:
    script = setup.setup_script(
        paths,
        node,
        public_key=key.public_line,
        authorized_keys="~/.ssh/authorized_keys",
        node_setup=node_setup,
        log_dir=str(tmp_path / "share" / "setup"),
        setup_hash="h1",
        env={"AZ_BATCHAI_MOUNT_ROOT": "/mnt/it's"},
    )
    assert key.private_openssh not in script  # the private key travels on stdin only
    return sh(script, stdin=key.private_openssh, home=tmp_path / "home")


def test_ssh_config_is_strict() -> None:
    text = setup.ssh_config_text(setup.NodePaths("/h/.batchai/clusters/c"), user="azureuser", port=2222)
    mux = hashlib.sha256(b"/h/.batchai/clusters/c").hexdigest()[:8]
    assert text.splitlines()[1:] == [
        "Host *",
        "    ControlMaster auto",  # one shared connection per node and cluster, in a private folder
        f"    ControlPath %d/.batchai-ssh/{mux}-%C",
        "    ControlPersist 120",
        "    Port 2222",
        "    User azureuser",
        "    IdentityFile /h/.batchai/clusters/c/id_ed25519",
        "    IdentitiesOnly yes",
        "    UserKnownHostsFile /h/.batchai/clusters/c/known_hosts",
        "    GlobalKnownHostsFile /dev/null",
        "    StrictHostKeyChecking yes",
        "    BatchMode yes",
        "    ConnectTimeout 10",
        "    ServerAliveInterval 5",
        "    ServerAliveCountMax 3",
        "    LogLevel ERROR",
    ]


def test_home_path_quotes_everything_but_home() -> None:
    assert setup.home_path("~/.ssh/authorized keys") == "\"$HOME\"/'.ssh/authorized keys'"
    assert setup.home_path("/etc/ssh/keys/$(reboot)") == "'/etc/ssh/keys/$(reboot)'"


def test_setup_installs_the_key_once_and_runs_node_setup(paths: setup.NodePaths, tmp_path: Path) -> None:
    key = ssh_keys.generate("batchai-cluster:lab/c:/mnt/share")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAAother someone@else\n")
    result = run_setup(paths, tmp_path, key, node_setup='echo "mount root: $AZ_BATCHAI_MOUNT_ROOT"; pwd')
    assert result.returncode == 0, result.stderr
    installed = Path(paths.key)
    assert installed.read_text() == key.private_openssh
    assert installed.stat().st_mode & 0o777 == 0o600
    assert Path(paths.cluster_dir).stat().st_mode & 0o777 == 0o700
    assert Path(paths.marker("n0")).read_text() == "h1\n"
    out = (tmp_path / "share" / "setup" / "stdout-setup-n0.txt").read_text()
    assert "mount root: /mnt/it's" in out and f"\n{home}\n" in out
    assert run_setup(paths, tmp_path, key).returncode == 0  # again: still one line for the key
    lines = (home / ".ssh" / "authorized_keys").read_text().splitlines()
    assert lines == ["ssh-ed25519 AAAAother someone@else", key.public_line]

    rotated = ssh_keys.generate("batchai-cluster:lab/c:/mnt/share")
    assert run_setup(paths, tmp_path, rotated).returncode == 0
    lines = (home / ".ssh" / "authorized_keys").read_text().splitlines()
    assert lines == ["ssh-ed25519 AAAAother someone@else", rotated.public_line]


def test_failed_node_setup_reports_its_stderr_and_sets_no_marker(
    paths: setup.NodePaths, tmp_path: Path
) -> None:
    key = ssh_keys.generate("batchai-cluster:lab/c:/mnt/share")
    result = run_setup(paths, tmp_path, key, node_setup="echo bad things >&2; exit 5")
    assert result.returncode == 5
    assert "node_setup exited with code 5" in result.stderr and "bad things" in result.stderr
    assert not Path(paths.marker("n0")).exists()


def test_refresh_writes_only_on_change_and_reports(paths: setup.NodePaths, tmp_path: Path) -> None:
    (tmp_path / "share_marker").mkdir()
    script = setup.refresh_script(
        paths,
        "n0",
        ssh_config="Host *\n",
        known_hosts="[h]:22 ssh-ed25519 AAAA\n",
        share_marker=str(tmp_path / "share_marker"),
    )
    first = sh(script)
    assert first.returncode == 0, first.stderr
    assert setup.parse_refresh(first.stdout) == {"hash": "", "share": "1", "gpus": "0"}
    config = Path(paths.ssh_config)
    assert config.read_text() == "Host *\n" and config.stat().st_mode & 0o777 == 0o600
    before = (config.stat().st_ino, Path(paths.known_hosts).stat().st_ino)
    Path(paths.marker("n0")).write_text("h1\n")
    second = sh(script)
    assert setup.parse_refresh(second.stdout)["hash"] == "h1"
    assert (config.stat().st_ino, Path(paths.known_hosts).stat().st_ino) == before  # unchanged: not rewritten
    blind = setup.refresh_script(
        paths, "n0", ssh_config="Host *\n", known_hosts="", share_marker="/nonexistent"
    )
    assert setup.parse_refresh(sh(blind).stdout)["share"] == "0"


def test_cleanup_removes_only_this_clusters_key(paths: setup.NodePaths, tmp_path: Path) -> None:
    key = ssh_keys.generate("batchai-cluster:lab/c:/mnt/share")
    other = ssh_keys.generate("batchai-cluster:lab/c2:/mnt/share")
    home = tmp_path / "home"
    assert run_setup(paths, tmp_path, key).returncode == 0
    ak = home / ".ssh" / "authorized_keys"
    ak.write_text(ak.read_text() + other.public_line + "\n")
    script = setup.cleanup_script(
        paths, authorized_keys="~/.ssh/authorized_keys", key_comment="batchai-cluster:lab/c:/mnt/share"
    )
    assert sh(script, home=home).returncode == 0
    assert ak.read_text().splitlines() == [other.public_line]
    assert not Path(paths.cluster_dir).exists()
    assert sh(script, home=home).returncode == 0  # again: nothing left to do, no error


def test_setup_hash_follows_what_setup_does() -> None:
    base = {"public_key": "k", "node_setup": None, "authorized_keys": "~/.ssh/a", "cluster_dir": "/d"}
    h = setup.setup_hash(**base)  # type: ignore[arg-type]
    assert h == setup.setup_hash(**base)  # type: ignore[arg-type]
    for field, value in (("public_key", "k2"), ("node_setup", "pip install x"), ("cluster_dir", "/e")):
        assert setup.setup_hash(**{**base, field: value}) != h  # type: ignore[arg-type]


def test_the_client_s_secrets_place_is_0600_and_removed_whole(tmp_path: Path) -> None:
    folder = tmp_path / "clusters" / "c"
    cluster_secrets.save(folder, {"A": "it's a\nmulti-line $value"})
    cluster_secrets.save(folder, {"bfs": "key"}, name=cluster_secrets.MOUNT_KEYS)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in folder.iterdir())
    assert cluster_secrets.load(folder) == {"A": "it's a\nmulti-line $value"}
    # the nodes' file, as sh sources it and as another client reads it back
    text = cluster_secrets.env_text({"A": "it's a\nmulti-line $value", "B": ""})
    out = sh(f'. /dev/stdin <<\'EOF_T\'\n{text}EOF_T\nprintf "%s|%s" "$A" "$B"')
    assert out.stdout == "it's a\nmulti-line $value|"
    assert cluster_secrets.parse_env(text) == {"A": "it's a\nmulti-line $value", "B": ""}
    (folder / ".setup-secrets.json.123.tmp").write_text("{}")  # a save killed midway
    cluster_secrets.remove(folder)
    assert list(folder.iterdir()) == []
