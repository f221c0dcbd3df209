"""Distributed CIFAR-10 training with PyTorch DDP: the Batch AI tutorial's CNN, for ``pyTorchSettings`` jobs.

The same model and recipe as ``batchai_sdk.train.cifar10`` (the tutorial's Keras CNN: Conv32(same)-Conv32-
Pool-Dropout(0.25)-Conv64(same)-Conv64-Pool-Dropout(0.25)-Flatten-Dense512-Dropout(0.5)-Dense10, RMSprop with
learning rate 1e-4 x ranks, Keras 2's time-based decay 1e-6, batch 32 per rank, random shifts of up to 10 %
and horizontal flips), in ``torch.distributed`` with ``DistributedDataParallel``: gloo on CPU, NCCL on GPU
(``--mixed-precision``: ``torch.autocast`` float16 with a gradient scaler, CUDA only).

Run it as ``python -m batchai_sdk.train.cifar10_torch --dir OUT`` or, on nodes without batchai_sdk, as
``python cifar10_torch.py --dir OUT`` where ``cifar10_torch.py`` is the one file
``batchai_sdk.train.module_path("cifar10_torch")`` gives: this script with the package modules it imports
(the TensorFlow-free data loader, checkpoint helpers and options it shares with ``cifar10.py``). It reads
the variables torchrun and Batch AI set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT`` or ``AZ_BATCHAI_PYTORCH_INIT_METHOD``, ``AZ_BATCHAI_PYTORCH_BACKEND``);
without ``WORLD_SIZE`` it trains alone.

Choices and semantics
---------------------
* Sharding, epochs, steps and learning rate as in ``cifar10.py``: in one epoch the ranks together make one
  pass over the training set (each rank its own 1/N, reshuffled every epoch with a seed all ranks share);
  every rank runs the same number of steps; lr x N with a linear warm-up over ``--warmup-epochs``.
* Each dataset has its recipe (``RECIPES``) for the flags left unset: CIFAR-10 the tutorial's (lr 1e-4,
  5 warm-up epochs, shifts and flips); digits lr 5e-4, 1 warm-up epoch, shifts only (digits are not
  mirror-symmetric), which reaches 0.95 test accuracy on 2 ranks in 10 epochs (docs/toolkits.md has the
  figures; the tutorial's recipe is at 0.91 after 12).
* Checkpoints and resume (the contract of issue 13): rank 0 writes ``<dir>/checkpoints/checkpoint-NNN.pt``
  (model, optimizer, scheduler, epoch, seed) after every epoch, atomically (a temp file, then a rename), and
  keeps the last three. A run whose ``--dir`` holds checkpoints resumes by itself from the latest one (no flag
  needed; ``--resume`` makes a missing checkpoint an error, ``--restart`` deletes them and starts over).
  ``metrics.jsonl`` is cut back to the checkpoint's epoch. So a restarted job loses at most one epoch.
  With ``AZ_BATCHAI_JOB_RESTART_COUNT`` above 0 (a requeued job's later attempts) rank 0 prints
  ``Restart N (AZ_BATCHAI_JOB_RESTART_COUNT=N)`` first.
* SIGTERM (eviction notice, ``job terminate``): the ranks agree at the next step (a tiny allreduce per
  step), rank 0 writes ``checkpoint-NNN.pt`` holding the weights reached so far in the interrupted epoch
  NNN+1 with the step reached and every rank's running sums of the epoch's metrics, and every rank exits
  with status 143; a resumed run goes on at that step.
* Bit-exact resume: every random draw of a step (dropout, augmentation) comes from a seed made of the run's
  seed, the epoch, the step and the rank, and the data order from the seed and the epoch, so a run resumed
  from any checkpoint (the optimizer's, the schedule's and the gradient scaler's state restored) computes
  the same losses as a run never stopped (``tests/train/test_train_exact_resume.py``).
* SIGUSR1 dumps every thread's stack to stderr (``faulthandler``): what the hang watchdog collects.
* Metrics: rank 0 appends one JSON line per epoch to ``<dir>/metrics.jsonl``, the same keys as ``cifar10.py``
  (epoch, loss, accuracy, val_loss, val_accuracy, images_per_sec, seconds), so ``job.metrics()`` reads both.
* Outputs: ``<dir>/saved_models/cifar10_torch_model.pt`` (the final ``state_dict``, rank 0);
  ``--save-rank-weights``: every rank writes the SHA-256 of its weights to
  ``<dir>/rank-<r>.weights.sha256``.
* Errors a user can fix (no data, no checkpoint for ``--resume``) print ``error: ...`` on every rank and
  exit 2.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import json
import os
import random
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoints import checkpoint_name, find_checkpoints, restart_count, trim_metrics
from .cli_args import RECIPES, add_common_arguments, apply_recipe, new_parser, recipe_defaults
from .datasets import load_training_data, steps_per_epoch
from .errors import UserError
from .report import augmentation_text, print_test_scores, saved_model_path, write_rank_weights

MODEL_FILE = "cifar10_torch_model.pt"
CHECKPOINT_SUFFIX = ".pt"
KEEP_CHECKPOINTS = 3
SIGTERM_EXIT = 143


# ------------------------------------------------------------------------------------------------ model


def build_model(num_classes: int = 10) -> Any:
    """The tutorial's CNN for 32x32x3 images (logits out; the softmax is in the loss)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(64 * 6 * 6, 512),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(512, num_classes),
    )


def weights_sha256(model: Any) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def lr_factor(step: int, *, world: int, warmup_steps: int, decay: float) -> float:
    """Multiplier of --lr at optimizer step ``step``: warm-up from 1 to ``world``, then Keras 2's decay."""
    scale = world if warmup_steps <= 0 else 1 + (world - 1) * min(1.0, step / warmup_steps)
    return scale / (1.0 + decay * step)


def shard_indices(n: int, *, seed: int, epoch: int, rank: int, world: int, steps: int, batch: int) -> Any:
    """This rank's training indices for ``epoch``: a permutation every rank draws alike, dealt round-robin,
    wrapped around so that every rank has exactly ``steps * batch`` of them."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    mine = order[rank::world]
    need = steps * batch
    return np.resize(mine, need) if len(mine) else order[:need]


def augment(images: Any, generator: Any, shift: float = 0.1, *, flip: bool = True) -> Any:
    """Random horizontal flips (unless ``flip`` is false) and integer shifts of up to ``shift`` x size,
    borders filled with the nearest pixel (the tutorial's ImageDataGenerator, to the nearest pixel)."""
    import torch
    import torch.nn.functional as F

    n, _, h, w = images.shape
    flips = torch.rand(n, generator=generator) < 0.5
    if flip:
        images = torch.where(flips[:, None, None, None], images.flip(3), images)
    pad_h, pad_w = max(1, int(h * shift)), max(1, int(w * shift))
    padded = F.pad(images, (pad_w, pad_w, pad_h, pad_h), mode="replicate")
    dy = torch.randint(0, 2 * pad_h + 1, (n,), generator=generator)
    dx = torch.randint(0, 2 * pad_w + 1, (n,), generator=generator)
    rows = (dy[:, None] + torch.arange(h)[None, :])[:, None, :, None].expand(
        n, images.shape[1], h, w + 2 * pad_w
    )
    out = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w)[None, :])[:, None, None, :].expand(n, images.shape[1], h, w)
    return out.gather(3, cols)


# ----------------------------------------------------------------------------------- checkpoints, logs


def save_atomic(obj: Any, path: Path) -> None:
    import torch

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------- command


def build_parser() -> argparse.ArgumentParser:
    """The command line: the options every training script takes, plus --resume or --restart."""
    parser = new_parser(
        "cifar10_torch.py",
        "Train the Batch AI tutorial's CIFAR-10 CNN with PyTorch DDP (one process per rank, "
        "started by a pyTorchSettings job, torchrun or mpirun with the torch variables set).",
    )
    add_common_arguments(
        parser,
        dir_help="output directory (checkpoints/, saved_models/, metrics.jsonl); a run resumes from the "
        "checkpoints found there",
        warmup_help="linear warm-up from lr to lr x ranks",
        mixed_precision_help="float16 autocast with a gradient scaler on CUDA; ignored with a warning on CPU",
        recipe_defaults=recipe_defaults(),
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--resume",
        action="store_true",
        help="require a checkpoint to resume from (resuming is automatic when one exists)",
    )
    group.add_argument("--restart", action="store_true", help="delete earlier checkpoints and start over")
    return parser


class _Stop:
    """Set by SIGTERM; the ranks agree on it at every step."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, _frame: Any) -> None:
        self.requested = True


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


@dataclass
class _Ranks:
    """This process in the job: torch, its rank among ``world``, its device, the SIGTERM flag."""

    torch: Any
    dist: Any  # torch.distributed
    rank: int
    world: int
    local_rank: int
    device: Any
    stop: _Stop

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def agree(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        self.dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_sum(self, values: list[float]) -> list[float]:
        """``values`` summed over the ranks, element by element."""
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        if self.distributed:
            self.dist.all_reduce(t)
        return [float(v) for v in t.cpu()]

    def leave(self) -> None:
        """Leave together: a rank exiting with the group still up can abort its peer."""
        if self.distributed:
            self.dist.barrier()
            self.dist.destroy_process_group()
            # Gloo's threads drop their last work after this; one that still waits for the GIL when
            # Python finalizes aborts the process (pytorch/pytorch#190489): let them finish first.
            time.sleep(0.2)


@dataclass
class _Data:
    """What every rank agreed on before training: the set as tensors, the seed, the checkpoint's state."""

    train_x: Any
    train_y: Any
    test_x: Any
    test_y: Any
    seed: int
    state: dict[str, Any] | None
    steps: int  # per rank and epoch


@dataclass
class _Trainer:
    """The model and what trains it; ``ddp`` is the model wrapped for DistributedDataParallel (or itself)."""

    model: Any
    ddp: Any
    optimizer: Any
    scheduler: Any
    scaler: Any
    amp: bool
    start_epoch: int
    start_step: int = 0  # of start_epoch: a checkpoint written on SIGTERM mid-epoch goes on there
    partial: tuple[float, float, float] = (0.0, 0.0, 0.0)  # this rank's sums of the epoch's steps done


def start() -> _Ranks:
    """Import torch, catch SIGTERM and SIGUSR1, pick the device, join the process group."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        raise UserError(f"PyTorch is required (pip install 'batchai_sdk[torch]'): {exc}") from exc

    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    local_world = _env_int("LOCAL_WORLD_SIZE", 1)
    cuda = torch.cuda.is_available()
    backend = os.environ.get("AZ_BATCHAI_PYTORCH_BACKEND") or ("nccl" if cuda else "gloo")
    if cuda:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_world)))
    if world > 1:
        init = os.environ.get("AZ_BATCHAI_PYTORCH_INIT_METHOD") or "env://"
        dist.init_process_group(backend=backend, init_method=init, rank=rank, world_size=world)
    return _Ranks(torch, dist, rank, world, local_rank, device, stop)


def _decide(args: argparse.Namespace, torch: Any) -> dict[str, Any]:
    """Rank 0: the seed and the checkpoint to start from, or the error every rank reports."""
    out = args.dir
    ckpt_dir = out / "checkpoints"
    metrics_path = out / "metrics.jsonl"
    try:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        found = find_checkpoints(ckpt_dir, CHECKPOINT_SUFFIX)
        if args.restart:
            for _, path in found:
                path.unlink()
            found = []
        if args.resume and not found:
            raise UserError(f"--resume: no checkpoint-NNN.pt in {ckpt_dir}")
        state = None
        if found:
            try:
                state = torch.load(found[-1][1], map_location="cpu", weights_only=False)
            except Exception as exc:
                raise UserError(
                    f"cannot load checkpoint {found[-1][1]} ({type(exc).__name__}: {exc})"
                ) from exc
            trim_metrics(metrics_path, int(state["epoch"]))
        else:
            metrics_path.write_text("", encoding="utf-8")
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
        if state is not None:
            seed = int(state["seed"])
        return {"seed": seed, "state": state}
    except UserError as exc:
        return {"error": str(exc)}
    except OSError as exc:
        return {"error": f"cannot prepare {out}: {exc.strerror or exc}"}


def load_data(args: argparse.Namespace, ranks: _Ranks) -> _Data:
    """Step 1, data: rank 0 decides the seed and the checkpoint (or an error every rank reports), then
    every rank loads the set as tensors and seeds Python, numpy and torch alike."""
    torch = ranks.torch
    decision = ranks.agree(_decide(args, torch) if ranks.rank == 0 else {})
    if "error" in decision:
        ranks.leave()
        raise UserError(decision["error"])
    seed = int(decision["seed"])
    (x_train, y_train), (x_test, y_test) = load_training_data(args, ranks.world)

    def tensors(images: Any, labels: Any) -> tuple[Any, Any]:
        x = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2))).float().div_(255.0)
        return x, torch.from_numpy(labels.astype(np.int64))

    train_x, train_y = tensors(x_train, y_train)
    test_x, test_y = tensors(x_test, y_test)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    steps = steps_per_epoch(len(train_x), args.batch_size, ranks.world)
    return _Data(train_x, train_y, test_x, test_y, seed, decision["state"], steps)


def make_model(args: argparse.Namespace, ranks: _Ranks, data: _Data) -> _Trainer:
    """Step 2, model: the CNN with RMSprop, the warm-up and decay schedule and the gradient scaler, restored
    from the checkpoint, wrapped for DistributedDataParallel (which starts every rank from rank 0's)."""
    torch, device, world = ranks.torch, ranks.device, ranks.world
    from torch.nn.parallel import DistributedDataParallel

    model = build_model().to(device)
    if ranks.rank == 0:
        print(
            f"{args.dataset}: {len(data.train_x)} train and {len(data.test_x)} test images, {world} rank(s), "
            f"{data.steps} steps of {args.batch_size} per rank and epoch, lr {args.lr:g} x {world}, "
            f"warm-up {args.warmup_epochs} epoch(s), augmentation {augmentation_text(args)}, "
            f"seed {data.seed}, {device.type}",
            flush=True,
        )
    optimizer = torch.optim.RMSprop(model.parameters(), lr=args.lr, alpha=0.9, eps=1e-7)
    warmup_steps = args.warmup_epochs * data.steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, world=world, warmup_steps=warmup_steps, decay=args.decay)
    )
    start_epoch = 0
    restart = restart_count()
    if restart and ranks.rank == 0:
        print(f"Restart {restart} (AZ_BATCHAI_JOB_RESTART_COUNT={restart})", flush=True)
    state = data.state
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start_epoch = int(state["epoch"])
        if ranks.rank == 0:
            step = state.get("step")
            where = f" at step {step} of epoch {start_epoch + 1}" if step else ""
            how = f" (written on SIGTERM mid-epoch{where})" if state.get("interrupted") else ""
            print(f"resuming from checkpoint epoch {start_epoch}{how}", flush=True)
    amp = bool(args.mixed_precision and device.type == "cuda")
    if args.mixed_precision and not amp and ranks.rank == 0:
        warnings.warn("--mixed-precision needs CUDA: training in float32", stacklevel=1)
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    cuda = device.type == "cuda"
    ddp = (
        DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
        if ranks.distributed
        else model
    )
    start_step, partial = 0, (0.0, 0.0, 0.0)
    if state is not None and state.get("interrupted") and state.get("world_size") == world:
        start_step = int(state.get("step") or 0)  # a checkpoint from before steps were kept: the epoch again
        partials = state.get("partials") or []
        if len(partials) == 3 * world:
            partial = (partials[3 * ranks.rank], partials[3 * ranks.rank + 1], partials[3 * ranks.rank + 2])
    if state is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    return _Trainer(model, ddp, optimizer, scheduler, scaler, amp, start_epoch, start_step, partial)


def _checkpoint(
    args: argparse.Namespace,
    ranks: _Ranks,
    data: _Data,
    trainer: _Trainer,
    epoch: int,
    *,
    interrupted: bool,
    step: int = 0,
    partials: list[float] | None = None,
) -> None:
    """Rank 0: ``checkpoint-NNN.pt`` (model, optimizer, scheduler, scaler, epoch, seed; written on SIGTERM:
    the step reached in epoch NNN+1 and every rank's sums of its steps); the last three are kept."""
    if ranks.rank != 0:
        return
    ckpt_dir = args.dir / "checkpoints"
    save_atomic(
        {
            "epoch": epoch,
            "seed": data.seed,
            "model": trainer.model.state_dict(),
            "optimizer": trainer.optimizer.state_dict(),
            "scheduler": trainer.scheduler.state_dict(),
            "scaler": trainer.scaler.state_dict(),
            "interrupted": interrupted,
            "step": step,
            "partials": partials or [],
            "world_size": ranks.world,
        },
        ckpt_dir / checkpoint_name(epoch, CHECKPOINT_SUFFIX),
    )
    for _, old in find_checkpoints(ckpt_dir, CHECKPOINT_SUFFIX)[:-KEEP_CHECKPOINTS]:
        old.unlink(missing_ok=True)


def _scores(ranks: _Ranks, trainer: _Trainer, xs: Any, ys: Any) -> tuple[float, float, float]:
    """(sum of losses, correct, count) of the model over ``xs``."""
    torch = ranks.torch
    import torch.nn.functional as F

    model = trainer.model
    model.eval()
    loss_sum = correct = 0.0
    autocast = torch.autocast(device_type=ranks.device.type, dtype=torch.float16, enabled=trainer.amp)
    with torch.no_grad(), autocast:
        for i in range(0, len(xs), 256):
            x, y = xs[i : i + 256].to(ranks.device), ys[i : i + 256].to(ranks.device)
            logits = model(x).float()
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += float((logits.argmax(1) == y).sum())
    return loss_sum, correct, float(len(xs))


def step_seed(seed: int, epoch: int, step: int, rank: int) -> int:
    """The seed of one step's random draws on one rank: the same whichever attempt runs the step."""
    return (seed * 1000003 + epoch * 100003 + step * 1009 + rank) % 2**63


def _train_epoch(
    args: argparse.Namespace,
    ranks: _Ranks,
    data: _Data,
    trainer: _Trainer,
    epoch: int,
    start_step: int = 0,
    partial: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> tuple[tuple[float, float, float], int | None]:
    """This rank's shard of one epoch from ``start_step`` on (``partial``: its sums of the steps before):
    ((loss sum, correct, images), None), or the sums so far and the step SIGTERM stopped it at (all ranks
    agree at each step, with a one-number allreduce)."""
    torch = ranks.torch
    import torch.nn.functional as F

    trainer.ddp.train()
    idx = torch.from_numpy(
        shard_indices(
            len(data.train_x),
            seed=data.seed,
            epoch=epoch,
            rank=ranks.rank,
            world=ranks.world,
            steps=data.steps,
            batch=args.batch_size,
        )
    )
    gen = torch.Generator()
    loss_sum, correct, seen = partial
    for step in range(start_step, data.steps):
        requested = float(ranks.stop.requested)
        if (ranks.all_sum([requested])[0] if ranks.distributed else requested) > 0:
            return (loss_sum, correct, seen), step
        torch.manual_seed(step_seed(data.seed, epoch, step, ranks.rank))  # dropout's masks
        gen.manual_seed(step_seed(data.seed, epoch, step, ranks.rank))  # augmentation's draws
        batch = idx[step * args.batch_size : (step + 1) * args.batch_size]
        x, y = data.train_x[batch], data.train_y[batch]
        if not args.no_augmentation:
            x = augment(x, gen, flip=RECIPES[args.dataset].flip)
        x, y = x.to(ranks.device, non_blocking=True), y.to(ranks.device, non_blocking=True)
        trainer.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=ranks.device.type, dtype=torch.float16, enabled=trainer.amp):
            logits = trainer.ddp(x)
            loss = F.cross_entropy(logits.float(), y)
        trainer.scaler.scale(loss).backward()
        trainer.scaler.step(trainer.optimizer)
        trainer.scaler.update()
        trainer.scheduler.step()
        loss_sum += float(loss.detach()) * len(y)
        correct += float((logits.argmax(1) == y).sum())
        seen += len(y)
    return (loss_sum, correct, seen), None


def fit(args: argparse.Namespace, ranks: _Ranks, data: _Data, trainer: _Trainer) -> int | None:
    """Step 3, fit: the epochs left, each validated on the ranks' shards of the test set, checkpointed and
    logged to ``metrics.jsonl`` by rank 0; on SIGTERM rank 0 saves the weights reached and 143 is returned;
    None once every epoch ran."""
    metrics_path = args.dir / "metrics.jsonl"
    for epoch in range(trainer.start_epoch, args.epochs):
        began = time.perf_counter()
        first = epoch == trainer.start_epoch
        start_step, partial = (trainer.start_step, trainer.partial) if first else (0, (0.0, 0.0, 0.0))
        trained, stopped_at = _train_epoch(args, ranks, data, trainer, epoch, start_step, partial)
        if stopped_at is not None:
            mine = [0.0] * (3 * ranks.world)  # every rank's sums, each in its own place: gathered exactly
            mine[3 * ranks.rank : 3 * ranks.rank + 3] = trained
            partials = ranks.all_sum(mine) if ranks.distributed else mine
            _checkpoint(
                args, ranks, data, trainer, epoch, interrupted=True, step=stopped_at, partials=partials
            )
            if ranks.distributed:
                ranks.dist.barrier()
            if ranks.rank == 0:
                print(f"SIGTERM: checkpoint of epoch {epoch} written; exiting", flush=True)
            return SIGTERM_EXIT
        train_seconds = time.perf_counter() - began
        share = slice(ranks.rank, None, ranks.world)  # validation sharded over the ranks, summed
        validated = _scores(ranks, trainer, data.test_x[share], data.test_y[share])
        totals = ranks.all_sum([*trained, *validated])
        _checkpoint(args, ranks, data, trainer, epoch + 1, interrupted=False)
        if ranks.rank == 0:
            record = {
                "epoch": epoch + 1,
                "loss": totals[0] / totals[2],
                "accuracy": totals[1] / totals[2],
                "val_loss": totals[3] / totals[5],
                "val_accuracy": totals[4] / totals[5],
                "images_per_sec": totals[2] / train_seconds if train_seconds > 0 else None,
                "seconds": time.perf_counter() - began,
                "time": round(time.time(), 3),  # when it ended: job.goodput's clock
            }
            with metrics_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            print(
                f"Epoch {epoch + 1}/{args.epochs} - loss {record['loss']:.4f}"
                f" - accuracy {record['accuracy']:.4f}"
                f" - val_loss {record['val_loss']:.4f} - val_accuracy {record['val_accuracy']:.4f}"
                f" - {record['seconds']:.1f}s",
                flush=True,
            )
    return None


def evaluate(ranks: _Ranks, data: _Data, trainer: _Trainer) -> None:
    """Step 4, evaluate: rank 0 scores the whole test set and prints ``Test loss`` / ``Test accuracy``."""
    if ranks.rank == 0:
        loss_sum, correct, count = _scores(ranks, trainer, data.test_x, data.test_y)
        print_test_scores(loss_sum / count, correct / count)


def save(args: argparse.Namespace, ranks: _Ranks, trainer: _Trainer) -> None:
    """Step 5, save: rank 0 writes the ``state_dict`` to ``saved_models/``; with ``--save-rank-weights``
    every rank writes the hash of its weights."""
    if ranks.rank == 0:
        path = saved_model_path(args.dir, MODEL_FILE)
        save_atomic(trainer.model.state_dict(), path)
        print(f"Saved trained model at {path}", flush=True)
    if args.save_rank_weights:
        write_rank_weights(args.dir, ranks.rank, weights_sha256(trainer.model))


def train(args: argparse.Namespace) -> int:
    """The whole run in its five steps; returns the exit status (0, or 143 when stopped by SIGTERM)."""
    ranks = start()
    data = load_data(args, ranks)
    trainer = make_model(args, ranks, data)
    stopped = fit(args, ranks, data, trainer)
    if stopped is not None:
        return stopped
    evaluate(ranks, data, trainer)
    save(args, ranks, trainer)
    ranks.leave()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = apply_recipe(build_parser().parse_args(argv))
    try:
        return train(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
