"""Node setup for Azure VMs: the script the CustomScript extension runs once, as root, on every instance.

It mounts the workspace's Azure file share where jobs expect it (``<mount_root>/<share>``, the
``AZ_BATCHAI_MOUNT_ROOT`` layout of Batch AI) with the storage key in a 0600 credentials file
(``/etc/smbcredentials/<account>.cred``) that ``mount`` reads through ``/etc/fstab`` — the key is never
on a command line, never echoed, never in the extension's log. Then, unless told otherwise, it installs
the training stack (TensorFlow 2.15.1 with CUDA + Horovod 0.28.1 built with NCCL and MPI) in a venv.

The script reaches the VM inside the extension's ``protectedSettings`` (encrypted by ARM, readable only
by root on the VM). The cluster's own ``node_setup`` command is not here: it runs over SSH, as the
admin user, like on the SSH backend (see backend.py), so its output lands in the job logs on the share.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ...mounts import Mount
from .mount_setup import credentials_path, mount_keys, mount_script

BATCHAI_DIR = "/opt/batchai"
STACK_VERSION = "tf2.15.1-hvd0.28.1-1"  # bump to reinstall on nodes created from a changed script
SETUP_LOG = "/var/log/batchai-node-setup.log"
DONE_MARKER = "/var/lib/batchai/node-setup.done"


@dataclass(frozen=True)
class NodeEnvironment:
    """Where things are on the nodes; the defaults describe an Azure VM after this node setup."""

    mount_root: str = "/mnt/batch/tasks/shared/LS_root/mounts"  # Batch AI's AZ_BATCHAI_MOUNT_ROOT
    temp_root: str = "/mnt/batch/tasks/tmp"  # on the VM's local (resource) disk
    python: str = f"{BATCHAI_DIR}/venv/bin/python"
    mpirun: str = f"{BATCHAI_DIR}/openmpi/bin/mpirun"
    mpi_prefix: str | None = f"{BATCHAI_DIR}/openmpi"  # mpirun --prefix: orted found on every node
    path: str | None = (
        f"{BATCHAI_DIR}/venv/bin:{BATCHAI_DIR}/openmpi/bin:/usr/local/cuda/bin:"
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    )
    mpi_args: tuple[str, ...] = ()  # extra mpirun options (e.g. btl settings)

    def share_path(self, share: str) -> str:
        return posixpath.join(self.mount_root, share)


def _stack_script(env: NodeEnvironment) -> list[str]:
    q = shlex.quote
    venv = posixpath.dirname(posixpath.dirname(env.python))
    marker = f"{BATCHAI_DIR}/.stack-{STACK_VERSION}"
    return [
        f"if [ ! -e {q(marker)} ]; then",
        '  step "installing the training stack: TensorFlow 2.15.1 (CUDA) + Horovod 0.28.1 (NCCL, MPI)"',
        "  run apt-get install -y -q python3-venv python3-dev build-essential",
        # The Azure HPC image ships Open MPI under /opt/openmpi-*; elsewhere Debian's is installed.
        "  mpi=$(ls -d /opt/openmpi-* 2>/dev/null | sort -V | tail -n 1)",
        '  if [ -z "$mpi" ]; then run apt-get install -y -q openmpi-bin libopenmpi-dev; mpi=/usr; fi',
        f'  ln -sfn "$mpi" {q(BATCHAI_DIR)}/openmpi',
        f"  [ -x {q(env.python)} ] || run python3 -m venv {q(venv)}",
        f"  pip={q(venv)}/bin/pip",
        '  run "$pip" install -q --upgrade pip wheel cmake',
        "  run \"$pip\" install -q 'tensorflow[and-cuda]==2.15.1' 'numpy<2' h5py scikit-learn",
        # NCCL: the image's when it has headers, else the nvidia-nccl wheel TensorFlow brought along.
        "  nccl=/usr",
        "  if [ ! -e /usr/include/nccl.h ]; then",
        f"    nccl=$({q(env.python)} -c "
        "'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))')",
        '    [ -e "$nccl/lib/libnccl.so" ] || ln -sf libnccl.so.2 "$nccl/lib/libnccl.so"',
        "  fi",
        f"  run env PATH={q(BATCHAI_DIR)}/openmpi/bin:/usr/local/cuda/bin:$PATH "
        'HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_HOME="$nccl" HOROVOD_CUDA_HOME=/usr/local/cuda '
        "HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 "
        "HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 CMAKE_POLICY_VERSION_MINIMUM=3.5 "
        '"$pip" install -q --no-build-isolation --no-cache-dir horovod==0.28.1',
        f"  run {q(env.python)} -c "
        "'import horovod.tensorflow as hvd; assert hvd.mpi_built() and hvd.nccl_built()'",
        f"  touch {q(marker)}",
        "fi",
    ]


def setup_script(
    *,
    account: str,
    account_key: str,
    share: str,
    admin_user: str,
    env: NodeEnvironment,
    file_host: str | None = None,
    install_stack: bool = True,
    mounts: Sequence[Mount] = (),
) -> str:
    """The bash script of the CustomScript extension. It holds ``account_key`` (and the keys of
    ``mounts``, the cluster's own mounts: mount_setup.py): pass it only in ``protectedSettings``; never
    log it."""
    q = shlex.quote
    host = file_host or f"{account}.file.core.windows.net"
    mount = env.share_path(share)
    cred = credentials_path(account)
    if "\n" in account_key or "EOF_BATCHAI" in account_key:
        raise ValueError("unexpected characters in the storage key")
    lines = [
        "#!/bin/bash",
        "# batchai_sdk node setup: mounts the workspace share, installs the training stack.",
        "set -eu",
        f"log={q(SETUP_LOG)}",
        'step() { echo "[batchai] $*"; }',
        # On failure the log's tail goes to stderr, which the extension reports through ARM.
        'run() { "$@" >>"$log" 2>&1 || '
        '{ echo "[batchai] failed: $*" >&2; tail -n 20 "$log" >&2; exit 1; }; }',
        "export DEBIAN_FRONTEND=noninteractive",
        f"admin={q(admin_user)}",
        f"mkdir -p {q(BATCHAI_DIR)} /var/lib/batchai",
        'step "mounting the workspace share"',
        "command -v mount.cifs >/dev/null 2>&1 || "
        "{ run apt-get update -q; run apt-get install -y -q cifs-utils; }",
        "install -d -m 700 /etc/smbcredentials",
        f"(umask 077; cat > {q(cred)}.tmp <<'EOF_BATCHAI'",
        f"username={account}",
        f"password={account_key}",
        "EOF_BATCHAI",
        ")",
        f"chmod 600 {q(cred)}.tmp && mv -f {q(cred)}.tmp {q(cred)}",
        'uid=$(id -u "$admin"); gid=$(id -g "$admin")',
        f'install -d -o "$admin" -g "$admin" {q(env.mount_root)} {q(env.temp_root)}',
        f"mkdir -p {q(mount)}",
        f'opts="nofail,_netdev,vers=3.1.1,credentials={cred},uid=$uid,gid=$gid,'
        'dir_mode=0700,file_mode=0700,serverino,nosharesock,actimeo=1,mfsymlinks"',
        f'line="//{host}/{share} {mount} cifs $opts 0 0"',
        f"grep -v {q(' ' + mount + ' cifs ')} /etc/fstab > /etc/fstab.batchai || true",
        'echo "$line" >> /etc/fstab.batchai && mv -f /etc/fstab.batchai /etc/fstab',
        f"mountpoint -q {q(mount)} || run mount {q(mount)}",
        f"mountpoint -q {q(mount)} || {{ echo '[batchai] the share is not mounted' >&2; exit 1; }}",
    ]
    if mounts:
        keys = mount_keys(mounts, account=account, account_key=account_key)
        cache = posixpath.join(env.temp_root, "blobfuse2")
        lines += mount_script(mounts, mount_root=env.mount_root, cache_root=cache, keys=keys)
    if install_stack:
        lines += ["run apt-get update -q", *_stack_script(env)]
    lines += [
        f"date -u +%Y-%m-%dT%H:%M:%SZ > {q(DONE_MARKER)}",
        'step "node setup finished"',
        "",
    ]
    return "\n".join(lines)
