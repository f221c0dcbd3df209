#!/usr/bin/env bash
# Prepares this checkout on a fresh Debian machine: system packages, .venv, the pinned training stack
# (tensorflow-cpu 2.15.1 + Horovod 0.28.1 built with MPI and Gloo), torch, and batchai_sdk itself.
# Idempotent: each step is skipped when already done. The Horovod wheel is cached outside the checkout
# (BATCHAI_WHEEL_CACHE, default ~/.cache/batchai_sdk/wheels) so later runs skip the ~6 minute build.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${BATCHAI_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}
TF_VERSION=2.15.1
HVD_VERSION=0.28.1
CACHE=${BATCHAI_WHEEL_CACHE:-$HOME/.cache/batchai_sdk/wheels}
log() { printf '[bootstrap] %s\n' "$*" >&2; }

need_apt=()
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin)
[ -e /usr/include/x86_64-linux-gnu/openmpi/mpi.h ] || [ -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] || need_apt+=(libopenmpi-dev)
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need_apt+=(openssh-client)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
# A real Slurm for tests/slurm (slurmctld, slurmd, munged started by the test fixture)
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || need_apt+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || need_apt+=(munge)
# FUSE mounts for tests/ssh/test_ssh_mounts.py: an unmanagedFileSystems mount command (sshfs) run for real
command -v sshfs >/dev/null 2>&1 || need_apt+=(sshfs)
# Namespace nodes for the node-failure tests (tests/nsnodes.py): ip (netns, veth, bridge), unshare, nsenter
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || need_apt+=(iproute2)
command -v nsenter >/dev/null 2>&1 || need_apt+=(util-linux)
# A blob container mounted for real (tests/ssh/test_ssh_blob_rclone.py): rclone as the FUSE client, Azurite
# (Microsoft's storage emulator, from npm) as the blob endpoint
command -v rclone >/dev/null 2>&1 || need_apt+=(rclone)
command -v fusermount >/dev/null 2>&1 || command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  log "installing system packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

NPM_PREFIX=${BATCHAI_NPM_PREFIX:-$HOME/.cache/batchai_sdk/npm}
if ! command -v azurite-blob >/dev/null 2>&1 && [ ! -x "$NPM_PREFIX/node_modules/.bin/azurite-blob" ]; then
  log "installing azurite (npm) into $NPM_PREFIX"
  npm install -s --prefix "$NPM_PREFIX" --no-audit --no-fund azurite@3 ||
    log "azurite could not be installed: the blob mount test will be skipped"
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip wheel setuptools
fi
PIP="$VENV/bin/pip"
export PATH="$VENV/bin:$PATH"

# What is installed, read from the packages' metadata in one Python start (importing TensorFlow, Horovod
# and torch to ask took ~8 s of every ./dev run): "tensorflow-cpu 2.15.1", "horovod 0.28.1", "torch 2.x"
installed=$("$VENV/bin/python" - <<'PY' 2>/dev/null || true
import importlib.metadata as md
for name in ("tensorflow-cpu", "tensorflow", "horovod", "torch"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        pass
PY
)
has() { printf '%s\n' "$installed" | grep -qx "$1"; }
# Horovod's MPI build is asked of Horovod itself once, then remembered next to the venv
HVD_STAMP="$VENV/.batchai-horovod-mpi-$HVD_VERSION"

if ! has "tensorflow-cpu $TF_VERSION" && ! has "tensorflow $TF_VERSION"; then
  log "installing tensorflow-cpu==$TF_VERSION"
  "$PIP" install -q "tensorflow-cpu==$TF_VERSION" "cmake>=3.20"
fi

if ! { has "horovod $HVD_VERSION" && [ -f "$HVD_STAMP" ]; } &&
  ! "$VENV/bin/python" -c "import horovod.tensorflow as h; import horovod, sys; sys.exit(horovod.__version__ != '$HVD_VERSION' or not h.mpi_built())" 2>/dev/null; then
  mpi_id=$(mpirun --version 2>/dev/null | head -1 | tr -c 'A-Za-z0-9.\n' '_')
  key="$CACHE/tf${TF_VERSION}-$("$VENV/bin/python" -c 'import sys;print("py%d%d"%sys.version_info[:2])')-${mpi_id}"
  mkdir -p "$key"
  if ! ls "$key"/horovod-"$HVD_VERSION"-*.whl >/dev/null 2>&1; then
    log "building horovod==$HVD_VERSION (MPI + Gloo, TensorFlow only; about 6 minutes on 2 cores) into $key"
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 CMAKE_POLICY_VERSION_MINIMUM=3.5 \
    MAKEFLAGS="-j$(nproc)" \
      "$PIP" wheel -q --no-build-isolation --no-deps "horovod==$HVD_VERSION" -w "$key"
  else
    log "using cached Horovod wheel from $key"
  fi
  "$PIP" install -q "$key"/horovod-"$HVD_VERSION"-*.whl
fi
[ -f "$HVD_STAMP" ] || touch "$HVD_STAMP"

# PyTorch for pyTorchSettings jobs and batchai_sdk.train.cifar10_torch (the `torch` extra), from the index
# pip is configured with; about a minute. Skipped when torch imports.
if ! printf '%s\n' "$installed" | grep -q '^torch '; then
  log "installing torch (PyTorch DDP jobs)"
  "$PIP" install -q "torch>=2.2"
fi

# batchai_sdk itself, editable, skipped (pip's resolve takes ~15 s) when it is already installed from this
# checkout with the same pyproject.toml and extras: the stamp holds what the last install was made from
if [ -f "$ROOT/pyproject.toml" ]; then
  EXTRAS=${BATCHAI_EXTRAS:-train,torch,azure,dev}
  STAMP="$VENV/.batchai_sdk-editable"
  want="$ROOT [$EXTRAS] $(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
  if [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ] && "$VENV/bin/python" - "$ROOT" <<'PY' 2>/dev/null
import importlib.metadata as md, json, sys
from pathlib import Path
from urllib.parse import unquote, urlparse

url = json.loads(md.distribution("batchai_sdk").read_text("direct_url.json") or "{}")
here = url.get("dir_info", {}).get("editable") and Path(unquote(urlparse(url["url"]).path)) == Path(sys.argv[1])
sys.exit(0 if here else 1)
PY
  then
    log "batchai_sdk already installed (editable) from $ROOT"
  else
    log "installing batchai_sdk (editable) with extras $EXTRAS"
    "$PIP" install -q -e "$ROOT[$EXTRAS]"
    # a new file, never written through: a venv copied with hard links (cp -al) shares the old one
    printf '%s' "$want" > "$STAMP.tmp" && mv -f "$STAMP.tmp" "$STAMP"
  fi
fi
log "ready: $VENV"
