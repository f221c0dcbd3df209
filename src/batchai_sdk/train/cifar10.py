"""Distributed CIFAR-10 training with Horovod: the Batch AI tutorial's ``cifar_cnn_distributed.py``, updated.

Same model and recipe as the tutorial (Keras' ``cifar10_cnn`` example): Conv32(same)-Conv32-Pool-Dropout(0.25)
-Conv64(same)-Conv64-Pool-Dropout(0.25)-Flatten-Dense512-Dropout(0.5)-Dense10(softmax), RMSprop with learning
rate 1e-4 x ranks and time-based decay 1e-6, batch 32 per rank, random shifts of up to 10 % and horizontal
flips, 100 passes over the training set in total.

Run it as ``python -m batchai_sdk.train.cifar10 --dir OUT`` or, on nodes without batchai_sdk, as
``python cifar10.py --dir OUT`` where ``cifar10.py`` is the one file ``module_path("cifar10")`` of
``batchai_sdk.train`` gives (``python -m batchai_sdk.train.bundle cifar10 cifar10.py`` writes it too): this
script with the package modules it imports inlined. That file imports only the standard library, numpy,
TensorFlow, Horovod and (for ``--dataset digits``) scikit-learn. Under ``mpirun -np N`` or
``horovodrun -np N`` it trains on N ranks.

Choices and semantics
---------------------
* Sharding: the training set is sharded across ranks (``Dataset.shard(size, rank)`` after a shuffle that
  every rank draws with the same seed, so the shards are disjoint and change every epoch). In one epoch each
  rank sees 1/size of the set, so one epoch is one pass over the set by all ranks together, and the default
  ``--epochs 100`` keeps the tutorial's budget of 100 passes whatever the number of ranks. (The tutorial gave
  every rank the whole set and ran ceil(100 / size) epochs: about the same budget, but epochs, checkpoints and
  metrics meant different things for different rank counts.) Every rank runs
  ceil(train samples / (size x batch size)) steps per epoch, so all ranks do the same number of allreduces.
  Validation is sharded the same way and the per-rank results are averaged by ``MetricAverageCallback``; the
  final ``Test loss``/``Test accuracy`` are computed by rank 0 on the whole test set.
* Learning rate: ``--lr`` (default 1e-4) x size, with Horovod's gradual warm-up from ``--lr`` over
  ``--warmup-epochs``. The tutorial's ``decay=1e-6`` keeps Keras 2's semantics: the legacy
  ``tf.keras.optimizers.legacy.RMSprop(decay=...)`` applies ``lr / (1 + decay * iterations)`` where
  ``iterations`` counts optimizer steps (Keras 2.15's new optimizers no longer accept ``decay``).
* Checkpoints: rank 0 writes ``<dir>/checkpoints/checkpoint-NNN.h5`` (model and optimizer state) after every
  epoch, atomically (a temporary file renamed). ``--resume`` loads the latest one on rank 0, broadcasts its
  epoch to every rank and continues from there; the weights and optimizer state reach the other ranks through
  ``BroadcastGlobalVariablesCallback``. A damaged latest checkpoint is skipped (with a warning) for the one
  before. A first run without ``--resume`` deletes earlier checkpoints in that folder and starts
  ``metrics.jsonl`` afresh.
* Restarts: when ``AZ_BATCHAI_JOB_RESTART_COUNT`` is set and above 0 (the SDK sets it on every attempt after
  the first: a requeued job, an evicted node), the run resumes by itself, as with ``--resume``, from the
  latest checkpoint in ``--dir``, or starts from epoch 0 when there is none yet.
* SIGTERM (an eviction notice, a terminated job): the ranks finish the current batch, agree to stop (a
  one-number allreduce after every batch, so that a signal reaching one node's ranks stops them all at the
  same step), rank 0 saves ``checkpoints/interrupted-NNN-SSSSS.h5`` (NNN epochs done, SSSSS steps of the
  next), every rank prints one ``stopped by SIGTERM ...`` line and exits with status 143. A restart resumes
  at that step: the rest of the interrupted epoch runs on a fresh shuffle, so at most the current batch is
  lost. The next epoch checkpoint removes the ``interrupted-*`` file.
* Stacks: SIGUSR1 makes every rank write the Python stacks of all its threads to stderr (``faulthandler``):
  what the SDK's hang watchdog sends where py-spy is not installed.
* Metrics: rank 0 appends one JSON line per epoch to ``<dir>/metrics.jsonl`` with the keys epoch (1-based),
  loss, accuracy, val_loss, val_accuracy (averaged over ranks), images_per_sec (images trained per second by
  all ranks together, over the training part of the epoch) and seconds (wall time of the whole epoch,
  validation and checkpoint included).
* Errors: unreadable data, a resume without a checkpoint or an output folder that cannot be created are
  detected before training; the ranks then agree (one allgather) so that every rank prints ``error: ...``
  to stderr and exits with status 2 instead of leaving the others waiting in a collective.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import os
import random
import signal
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoints import (
    RESTART_COUNT_VARIABLE,
    checkpoint_name,
    interrupted_name,
    prepare_outputs,
    restart_count,
    trim_metrics,
)
from .cli_args import RECIPES, add_common_arguments, apply_recipe, new_parser, recipe_defaults
from .datasets import IMAGE_SHAPE, NUM_CLASSES, Array, Arrays, load_training_data, steps_per_epoch
from .errors import UserError, to_stderr
from .keras_callbacks import (
    Interrupted,
    SigtermFlag,
    make_checkpointer,
    make_metrics_logger,
    make_sigterm_stopper,
    save_atomically,
)
from .report import augmentation_text, print_test_scores, saved_model_path, write_rank_weights
from .tf_data import make_eval_dataset, make_train_dataset

MODEL_NAME = "keras_cifar10_trained_model.h5"
EXIT_SIGTERM = 143  # 128 + SIGTERM, as a shell reports a process ended by it


# ------------------------------------------------------------------------------------------------- model


def build_model(input_shape: tuple[int, int, int] = IMAGE_SHAPE, num_classes: int = NUM_CLASSES) -> Any:
    """The tutorial's CNN (uncompiled). Layers are named so that every rank's variables line up."""
    import tensorflow as tf

    layers = tf.keras.layers
    return tf.keras.Sequential(
        [
            layers.Input(shape=input_shape, name="image"),
            layers.Conv2D(32, (3, 3), padding="same", activation="relu", name="conv1"),
            layers.Conv2D(32, (3, 3), activation="relu", name="conv2"),
            layers.MaxPooling2D(pool_size=(2, 2), name="pool1"),
            layers.Dropout(0.25, name="drop1"),
            layers.Conv2D(64, (3, 3), padding="same", activation="relu", name="conv3"),
            layers.Conv2D(64, (3, 3), activation="relu", name="conv4"),
            layers.MaxPooling2D(pool_size=(2, 2), name="pool2"),
            layers.Dropout(0.25, name="drop2"),
            layers.Flatten(name="flatten"),
            layers.Dense(512, activation="relu", name="dense"),
            layers.Dropout(0.5, name="drop3"),
            layers.Dense(num_classes, name="logits"),
            # float32 output keeps the softmax and the loss stable under mixed precision.
            layers.Activation("softmax", dtype="float32", name="softmax"),
        ],
        name="cifar10_cnn",
    )


def make_optimizer(learning_rate: float, decay: float) -> Any:
    """RMSprop with Keras 2's time-based decay: lr / (1 + decay * iterations)."""
    import tensorflow as tf

    return tf.keras.optimizers.legacy.RMSprop(learning_rate=learning_rate, decay=decay)


def weights_sha256(model: Any) -> str:
    digest = hashlib.sha256()
    for weights in model.get_weights():
        digest.update(np.ascontiguousarray(weights).tobytes())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------- command


_EPILOG = """\
distribution:
  The training set is sharded across the N ranks: in one epoch each rank trains on its own 1/N of the
  set, so an epoch is one pass over the set by all ranks together and the default --epochs 100 keeps the
  tutorial's budget of 100 passes for any N (the tutorial instead gave every rank the whole set and ran
  ceil(100/N) epochs). The learning rate is --lr x N, warmed up from --lr over --warmup-epochs, with RMSprop's
  time-based decay lr / (1 + decay x step).

outputs in --dir:
  saved_models/keras_cifar10_trained_model.h5   final model (rank 0)
  checkpoints/checkpoint-NNN.h5                 model + optimizer after each epoch (rank 0), for --resume
  checkpoints/interrupted-NNN-SSSSS.h5          saved on SIGTERM at step SSSSS of epoch NNN+1 (exit 143)
  metrics.jsonl                                 one JSON line per epoch: epoch, loss, accuracy, val_loss,
                                                val_accuracy, images_per_sec (all ranks), seconds

restarts:
  With AZ_BATCHAI_JOB_RESTART_COUNT above 0 (set by the SDK on a requeued job's later attempts) the run
  resumes by itself from the newest checkpoint in --dir, as with --resume, or starts afresh if there is none.
  SIGTERM stops every rank at the end of the current batch, with a checkpoint. SIGUSR1 prints every
  thread's stack to stderr (faulthandler).

examples:
  mpirun -np 4 python cifar10.py --dir /mnt/share/cifar --data-dir /mnt/share/data
  horovodrun -np 2 python -m batchai_sdk.train.cifar10 --dir out --dataset digits --epochs 5
"""


def build_parser() -> argparse.ArgumentParser:
    """The command line: the options every training script takes, plus --resume and --verbose."""
    parser = new_parser(
        "cifar10.py",
        "Train the Batch AI tutorial's CIFAR-10 CNN with Horovod (run under mpirun/horovodrun).",
        _EPILOG,
    )
    add_common_arguments(
        parser,
        dir_help="output directory, usually on the shared file system: saved_models/, checkpoints/, "
        "metrics.jsonl",
        warmup_help="epochs of Horovod's gradual learning-rate warm-up from lr to lr x ranks; 0 disables it",
        mixed_precision_help="compute in float16 with float32 variables (mixed_float16); needs a GPU, "
        "ignored with a warning on CPU",
        recipe_defaults=recipe_defaults(),
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest <dir>/checkpoints/checkpoint-NNN.h5 (weights, optimizer state, "
        "epoch); --epochs stays the total, so --resume --epochs 100 finishes an interrupted 100-epoch run",
    )
    parser.add_argument(
        "--verbose",
        type=int,
        choices=(0, 1, 2),
        default=2,
        help="Keras progress on rank 0: 0 silent, 1 progress bar, 2 one line per epoch, best for log files "
        "(default: %(default)s); other ranks are always silent",
    )
    return parser


def _pin_gpu(tf: Any, local_rank: int) -> list[Any]:
    """One GPU per process (the one matching the local rank), with on-demand memory growth."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")
    return list(gpus)


class _ReportedError(UserError):
    """A UserError whose message this rank has already printed."""


def _agree(hvd_tf: Any, error: str | None, step: str) -> None:
    """Collective: if any rank reported an error, every rank prints one and raises _ReportedError.

    The ranks print before a final barrier so that no rank exits (and makes mpirun kill the others) before
    every rank has written its message.
    """
    errors = hvd_tf.allgather_object(error, name=f"startup_{step}")
    failures = [(rank, message) for rank, message in enumerate(errors) if message]
    if not failures:
        return
    own = errors[hvd_tf.rank()]
    rank, first = failures[0]
    message = own or f"rank {rank} failed: {first}"
    to_stderr(f"error: {message}")
    hvd_tf.allgather_object(None, name=f"reported_{step}")
    raise _ReportedError(message)


def _load_latest(hvd: Any, candidates: list[tuple[int, int, Path]]) -> tuple[int, int, Path, Any]:
    """Rank 0: the newest checkpoint that loads; damaged ones are skipped with a warning."""
    failure: UserError | None = None
    for epoch, step, path in candidates:
        try:
            return epoch, step, path, _load_checkpoint(hvd, path)
        except UserError as exc:
            to_stderr(f"warning: skipping checkpoint {path.name}: {exc}")
            failure = failure or exc
    assert failure is not None
    raise failure


def _load_checkpoint(hvd: Any, path: Path) -> tuple[list[Array], list[Array]]:
    """Rank 0: model weights and optimizer state of a checkpoint, checked against this script's model."""
    try:
        restored = hvd.load_model(str(path), legacy_opts=True)
    except Exception as exc:  # h5py and Keras raise many kinds for a damaged file
        raise UserError(f"cannot load checkpoint {path} ({type(exc).__name__}: {exc})") from exc
    weights = restored.get_weights()
    expected = [tuple(w.shape) for w in build_model().get_weights()]
    if [tuple(w.shape) for w in weights] != expected or restored.optimizer is None:
        raise UserError(f"checkpoint {path} does not hold this script's model and optimizer")
    slots = restored.optimizer.get_weights()
    if len(slots) != 1 + len(restored.trainable_weights):  # iterations + one RMS slot per variable
        raise UserError(f"checkpoint {path} has no RMSprop state ({len(slots)} optimizer weights)")
    return weights, slots


def _describe(exc: Exception) -> str:
    return str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"


@dataclass
class _Ranks:
    """This process in the job: the frameworks, its rank among ``size``, its GPUs, the SIGTERM flag."""

    tf: Any
    hvd: Any  # horovod.tensorflow.keras
    hvd_tf: Any  # horovod.tensorflow
    rank: int
    size: int
    local_rank: int
    gpus: list[Any]
    sigterm: SigtermFlag

    @property
    def is_root(self) -> bool:
        return self.rank == 0


@dataclass
class _Data:
    """What every rank agreed on before training: the set, the seed and where to start."""

    train: tuple[Array, Array]
    test: tuple[Array, Array]
    seed: int
    steps: int  # per rank and epoch
    resume_epoch: int
    resume_step: int
    resume_path: Path | None
    restored: tuple[list[Array], list[Array]] | None  # rank 0: weights and optimizer state
    restart: int


def start() -> _Ranks:
    """Import the frameworks, catch SIGTERM, start Horovod, pin this rank's GPU."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        import horovod.tensorflow as hvd_tf
        import horovod.tensorflow.keras as hvd
        import tensorflow as tf
    except ImportError as exc:
        raise UserError(f"TensorFlow and Horovod (with TensorFlow support) are required: {exc}") from exc

    # The h5 format is what the tutorial (and the SDK) expects; Keras 2.15 warns about it at every save.
    warnings.filterwarnings(
        "ignore", message="You are saving your model as an HDF5 file", category=UserWarning
    )
    sigterm = SigtermFlag()
    sigterm.install()  # from here on SIGTERM stops training at the next batch end, with a checkpoint
    hvd.init()
    gpus = _pin_gpu(tf, hvd.local_rank())
    return _Ranks(tf, hvd, hvd_tf, hvd.rank(), hvd.size(), hvd.local_rank(), gpus, sigterm)


def load_data(args: argparse.Namespace, ranks: _Ranks) -> _Data:
    """Step 1, data: the training and test sets, the checkpoint to resume from, the seed — every failure
    the user can fix found before any collective op, and agreed on by every rank."""
    hvd, out_dir = ranks.hvd, args.dir
    data: Arrays | None = None
    resume_epoch, resume_step, resume_path = 0, 0, None
    restart = restart_count()
    restored: tuple[list[Array], list[Array]] | None = None
    download = args.dataset == "cifar10" and args.data_dir is None
    error: str | None = None
    try:
        if not download or ranks.local_rank == 0:  # one download per node; the others read its cache later
            data = load_training_data(args, ranks.size)
        if ranks.is_root:
            candidates = prepare_outputs(out_dir, args.resume, restart)
            if candidates:
                resume_epoch, resume_step, resume_path, restored = _load_latest(hvd, candidates)
                trim_metrics(out_dir / "metrics.jsonl", resume_epoch)
    except Exception as exc:  # anything, not only UserError, must reach the agreement or the others hang
        error = _describe(exc)
    _agree(ranks.hvd_tf, error, "setup")
    if download:
        error = None
        try:
            if data is None:
                data = load_training_data(args, ranks.size)
        except Exception as exc:
            error = _describe(exc)
        _agree(ranks.hvd_tf, error, "download")
    assert data is not None
    train_set, test_set = data

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    seed = int(hvd.broadcast(seed, root_rank=0, name="seed"))
    resume_epoch = int(hvd.broadcast(resume_epoch, root_rank=0, name="resume_epoch"))
    resume_step = int(hvd.broadcast(resume_step, root_rank=0, name="resume_step"))
    ranks.tf.keras.utils.set_random_seed(seed)  # python, numpy and TensorFlow; the same on every rank
    steps = steps_per_epoch(len(train_set[0]), args.batch_size, ranks.size)
    resume_step = min(resume_step, steps - 1)  # a checkpoint from a run with another number of ranks
    return _Data(train_set, test_set, seed, steps, resume_epoch, resume_step, resume_path, restored, restart)


def _announce(args: argparse.Namespace, ranks: _Ranks, data: _Data) -> None:
    """Rank 0's opening lines: the data, the distribution, where training starts."""
    if not ranks.is_root:
        return
    x_train, x_test = data.train[0], data.test[0]
    print("x_train shape:", x_train.shape)
    print(len(x_train), "train samples")
    print(len(x_test), "test samples")
    print(
        f"{ranks.size} rank(s), {data.steps} steps of {args.batch_size} per rank and epoch, "
        f"lr {args.lr * ranks.size:g}, seed {data.seed}, {'GPU' if ranks.gpus else 'CPU'}, "
        f"augmentation {augmentation_text(args)}"
    )
    if data.restart:
        print(f"Restart {data.restart} ({RESTART_COUNT_VARIABLE}={data.restart})")
    if data.resume_path is not None:
        at = (
            f" step {data.resume_step}/{data.steps} of epoch {data.resume_epoch + 1}"
            if data.resume_step
            else ""
        )
        print(f"Resumed from epoch {data.resume_epoch}{at} ({data.resume_path})")
    elif data.restart:
        print(f"No checkpoint in {args.dir / 'checkpoints'} yet: starting from epoch 0")


def make_model(args: argparse.Namespace, ranks: _Ranks, data: _Data) -> Any:
    """Step 2, model: the CNN compiled with the distributed optimizer, restored from the checkpoint, and the
    same on every rank (rank 0's random init or checkpoint broadcast before the first step)."""
    tf, hvd, hvd_tf = ranks.tf, ranks.hvd, ranks.hvd_tf
    mixed_precision = args.mixed_precision
    if mixed_precision and not ranks.gpus:
        if ranks.is_root:
            to_stderr("warning: --mixed-precision needs a GPU; training in float32 on CPU")
        mixed_precision = False
    if mixed_precision:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    model = build_model()
    model.compile(
        loss="sparse_categorical_crossentropy",
        optimizer=hvd.DistributedOptimizer(make_optimizer(args.lr * ranks.size, args.decay)),
        metrics=["accuracy"],
    )
    # Create the optimizer's slots now, identically on every rank: Horovod matches broadcasts by variable
    # name, and slots created lazily inside the first step get differently scoped names than restored ones.
    model.optimizer._create_all_weights(model.trainable_variables)
    if data.restored is not None:
        model.set_weights(data.restored[0])
        model.optimizer.set_weights(data.restored[1])
    # Start every rank from rank 0's state (random init or checkpoint) before the first step, so that the
    # first averaged gradient is computed on identical models. The fit's callback repeats it after step 1.
    hvd_tf.broadcast_variables(model.variables, root_rank=0)
    hvd_tf.broadcast_variables(model.optimizer.variables(), root_rank=0)
    return model


def fit(args: argparse.Namespace, ranks: _Ranks, data: _Data, model: Any) -> int | None:
    """Step 3, fit: the epochs left (first the rest of an interrupted one), a checkpoint and a metrics line
    after each on rank 0; on SIGTERM every rank stops at the same step, rank 0 saves, and the exit status
    (143) is returned; None once every epoch ran."""
    hvd = ranks.hvd
    x_train, y_train = data.train
    x_test, y_test = data.test
    steps, size, out_dir = data.steps, ranks.size, args.dir
    shard_validation = len(x_test) >= size
    val_ds = make_eval_dataset(
        x_test,
        y_test,
        max(args.batch_size, 128),
        rank=ranks.rank if shard_validation else 0,
        size=size if shard_validation else 1,
    )

    def epochs(first_epoch: int, end_epoch: int, done: int) -> None:
        """Epochs first_epoch+1..end_epoch; ``done``: steps of the first one run before an interruption."""
        train_ds = make_train_dataset(
            x_train,
            y_train,
            args.batch_size,
            rank=ranks.rank,
            size=size,
            seed=data.seed + first_epoch,
            augment=not args.no_augmentation,
            flip=RECIPES[args.dataset].flip,
            start_step=first_epoch * steps,
        )
        if done:
            train_ds = train_ds.skip(done)  # the interrupted epoch's remaining steps, on a fresh shuffle
        callbacks: list[Any] = [
            # Rank 0's weights and optimizer state (random init or checkpoint) go to every rank after step 1.
            hvd.callbacks.BroadcastGlobalVariablesCallback(0),
            # Average metrics over ranks before the callbacks below read them.
            hvd.callbacks.MetricAverageCallback(),
        ]
        if args.warmup_epochs > 0:
            callbacks.append(
                hvd.callbacks.LearningRateWarmupCallback(
                    initial_lr=args.lr * size,
                    warmup_epochs=args.warmup_epochs,
                    steps_per_epoch=steps,
                    verbose=1 if ranks.is_root and args.verbose else 0,
                )
            )
        if ranks.is_root:
            callbacks.append(make_checkpointer(out_dir / "checkpoints"))
            images = (steps - done) * args.batch_size * size
            callbacks.append(make_metrics_logger(out_dir / "metrics.jsonl", images))
        callbacks.append(make_sigterm_stopper(ranks.hvd_tf, ranks.sigterm, steps, done))  # last: see its doc
        model.fit(
            train_ds,
            steps_per_epoch=steps - done,
            epochs=end_epoch,
            initial_epoch=first_epoch,
            validation_data=val_ds,
            callbacks=callbacks,
            verbose=args.verbose if ranks.is_root else 0,
        )

    first, done = data.resume_epoch, data.resume_step
    try:
        if done and first < args.epochs:
            epochs(first, first + 1, done)
            first, done = first + 1, 0
        if first < args.epochs:
            epochs(first, args.epochs, 0)
    except Interrupted as stop:
        return _stop_on_sigterm(ranks.hvd_tf, model, stop, ranks.rank, steps, out_dir / "checkpoints")
    return None


def evaluate(args: argparse.Namespace, ranks: _Ranks, data: _Data, model: Any) -> None:
    """Step 4, evaluate: rank 0 scores the whole test set and prints ``Test loss`` / ``Test accuracy``."""
    if ranks.is_root:
        x_test, y_test = data.test
        scores = model.evaluate(make_eval_dataset(x_test, y_test, max(args.batch_size, 128)), verbose=0)
        print_test_scores(scores[0], scores[1])


def save(args: argparse.Namespace, ranks: _Ranks, model: Any) -> None:
    """Step 5, save: rank 0 writes the model to ``saved_models/``; with ``--save-rank-weights`` every rank
    writes the hash of its weights."""
    if args.save_rank_weights:
        write_rank_weights(args.dir, ranks.rank, weights_sha256(model))
    if ranks.is_root:
        model_path = saved_model_path(args.dir, MODEL_NAME)
        model.save(str(model_path))
        print(f"Saved trained model at {model_path}")


def train(args: argparse.Namespace) -> int:
    """The whole run in its five steps; returns the exit status (0, or 143 when stopped by SIGTERM)."""
    ranks = start()
    data = load_data(args, ranks)
    _announce(args, ranks, data)
    model = make_model(args, ranks, data)
    stopped = fit(args, ranks, data, model)
    if stopped is not None:
        return stopped
    evaluate(args, ranks, data, model)
    save(args, ranks, model)
    return 0


def _stop_on_sigterm(hvd_tf: Any, model: Any, stop: Interrupted, rank: int, steps: int, folder: Path) -> int:
    """Every rank, after Interrupted: rank 0 saves where training stopped; all wait for it, then exit 143."""
    saved: str | None = None
    if rank == 0:
        if stop.step:
            path = folder / interrupted_name(stop.epochs_done, stop.step)
            save_atomically(model, path)
        else:
            path = folder / checkpoint_name(stop.epochs_done)  # written at the epoch's end
        saved = str(path)
        epoch = stop.epochs_done
        where = f"step {stop.step}/{steps} of epoch {epoch + 1}" if stop.step else f"the end of epoch {epoch}"
        print(f"Stopped by SIGTERM at {where}: checkpoint {saved}; a restart resumes from it", flush=True)
    saved = hvd_tf.broadcast_object(saved, root_rank=0, name="sigterm_saved")  # every rank waits for the save
    to_stderr(f"rank {rank}: stopped by SIGTERM, checkpoint {saved}; exiting with status {EXIT_SIGTERM}")
    return EXIT_SIGTERM


def main(argv: list[str] | None = None) -> int:
    if hasattr(faulthandler, "register"):  # not on Windows
        # `kill -USR1 <pid>` (the SDK's hang watchdog without py-spy): every thread's stack to stderr.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    args = apply_recipe(build_parser().parse_args(argv))  # exits 2 on usage errors, before Horovod starts
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # progress lines reach the job's log files as they come
    try:
        return train(args)
    except UserError as exc:
        if not isinstance(exc, _ReportedError):
            to_stderr(f"error: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
