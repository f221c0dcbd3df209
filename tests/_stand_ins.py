"""Stand-ins put first on a job's PATH, which log what they were asked to do: the tutorial's preparation
tools (apt, pip) and a container engine that runs ``run``'s command on the host."""

from __future__ import annotations

import os

# The tutorial's job.json runs unchanged. Its jobPreparation (`apt update; apt install mpi-default-dev
# mpi-default-bin -y; pip install keras horovod`) was meant for a tensorflow:1.8.0 container; with no container
# runtime it runs on the host, where it would replace the pinned stack. These stand-ins go first on the job's
# PATH and log what they were asked to do.
TUTORIAL_SCRIPT = """
import argparse, os
import horovod.tensorflow as hvd
import tensorflow as tf
hvd.init()
parser = argparse.ArgumentParser()
parser.add_argument("-d", "--dir", help="directory to save model to")
args = parser.parse_args()
total = hvd.allreduce(tf.constant(1.0), op=hvd.Sum)
print(f"rank {hvd.rank()} of {hvd.size()}: {int(total.numpy())} ranks answered", flush=True)
if hvd.rank() == 0:
    save_dir = os.path.join(args.dir, "saved_models")
    os.makedirs(save_dir, exist_ok=True)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    model.save(os.path.join(save_dir, "keras_cifar10_trained_model.h5"))
    print("Test accuracy:", 1.0)
"""


def stand_in_tools(folder: os.PathLike[str] | str, log: os.PathLike[str] | str) -> str:
    """Write `apt` and `pip` stand-ins into ``folder`` that append their command line to ``log``."""
    from pathlib import Path

    bin_dir = Path(folder)
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in ("apt", "pip"):
        path = bin_dir / tool
        path.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\n')
        path.chmod(0o755)
    return str(bin_dir)


ENGINE_SCRIPT = r"""#!/bin/sh
# a stand-in container engine: records each call (arguments tab-separated) and runs `run`'s command on
# the host, so no image is ever pulled or started
line=$(printf '%s\t' "$(basename "$0")" "$@")
printf '%s\n' "$line" >> {log}
case "$1" in
  info) exit {info_code} ;;
  pull)
    if [ "{pull_seconds}" != "0" ]; then
      sleep {pull_seconds}  # a child of this shell: a timeout must kill the engine's whole group
    fi
    if [ -n "{pull_error}" ]; then
      echo "Trying to pull $2..."
      echo "Error: initializing source docker://$2: {pull_error}" >&2
      exit 125
    fi
    echo "Copying blob done" ;;
  run)
    shift
    while [ $# -gt 0 ]; do
      case "$1" in
        --rm) shift ;;
        --network|--ipc|--pid|--env-file|-w|-v|--gpus) shift 2 ;;
        *) break ;;
      esac
    done
    shift
    exec "$@" ;;
esac
"""


def stand_in_engine(
    folder: os.PathLike[str] | str,
    log: os.PathLike[str] | str,
    *,
    engine: str | None = "podman",
    pull_error: str = "",
    pull_seconds: float = 0,
) -> str:
    """Write `docker` and `podman` stand-ins into ``folder`` (put it first on the nodes' PATH): ``engine``
    answers (None: neither does), the other refuses as an engine without its daemon; every call is
    appended to ``log`` as a tab-separated line. ``pull`` takes ``pull_seconds``, then fails with
    ``pull_error`` when given; ``run``
    runs the rank's command on the host. A real docker or podman on the machine is never reached."""
    from pathlib import Path

    bin_dir = Path(folder)
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in ("docker", "podman"):
        path = bin_dir / tool
        code = 0 if tool == engine else 1
        script = ENGINE_SCRIPT.format(
            log=log, info_code=code, pull_error=pull_error, pull_seconds=pull_seconds
        )
        path.write_text(script)
        path.chmod(0o755)
    return str(bin_dir)


def engine_calls(log: os.PathLike[str] | str, command: str | None = None) -> list[list[str]]:
    """The stand-in engine's calls, each as [tool, *argv], ``info`` left out; only ``command``'s if given."""
    from pathlib import Path

    path = Path(log)
    lines = path.read_text().splitlines() if path.exists() else []
    calls = [line.rstrip("\t").split("\t") for line in lines if line]
    return [c for c in calls if c[1:2] != ["info"] and (command is None or c[1:2] == [command])]
