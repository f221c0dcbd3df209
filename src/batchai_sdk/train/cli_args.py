"""The training scripts' command lines: argument types and the options every script takes."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .datasets import CIFAR_ARCHIVE, CIFAR_FOLDER, DATASETS


@dataclass(frozen=True)
class Recipe:
    """A dataset's defaults for ``--lr`` and ``--warmup-epochs``, and whether its augmentation flips."""

    lr: float
    warmup_epochs: int
    flip: bool


RECIPES = {
    # the tutorial's: tuned for 100 epochs of CIFAR-10
    "cifar10": Recipe(lr=1e-4, warmup_epochs=5, flip=True),
    # digits are not mirror-symmetric, and 1438 images need a larger step to learn in a few epochs
    "digits": Recipe(lr=5e-4, warmup_epochs=1, flip=False),
}


def recipe_defaults() -> str:
    """The recipes as ``--help`` names them: ``cifar10: lr 0.0001, 5 warm-up epoch(s); digits: ...``."""
    return "; ".join(
        f"{name}: lr {r.lr:g}, {r.warmup_epochs} warm-up epoch(s)" for name, r in RECIPES.items()
    )


def apply_recipe(args: argparse.Namespace) -> argparse.Namespace:
    """Fill ``--lr`` and ``--warmup-epochs`` left unset with the dataset's recipe (``RECIPES``)."""
    recipe = RECIPES[args.dataset]
    if args.lr is None:
        args.lr = recipe.lr
    if args.warmup_epochs is None:
        args.warmup_epochs = recipe.warmup_epochs
    return args


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def seed_value(text: str) -> int:
    """argparse type: a seed numpy accepts, 0..2**32-1."""
    value = int(text)
    if not 0 <= value < 1 << 32:
        raise argparse.ArgumentTypeError(f"must lie in 0..2**32-1 (numpy's range), got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def new_parser(default_prog: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    """A parser named after the file that runs (``cifar_cnn_distributed.py`` once uploaded as that)."""
    return argparse.ArgumentParser(
        prog=os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else default_prog,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_common_arguments(
    parser: argparse.ArgumentParser,
    *,
    dir_help: str,
    warmup_help: str,
    mixed_precision_help: str,
    recipe_defaults: str | None = None,
) -> None:
    """The options both training scripts take, with the same names and types. With ``recipe_defaults``
    (a phrase naming each dataset's values), ``--lr`` and ``--warmup-epochs`` default to ``None``: the
    script fills them from the dataset's recipe."""
    lr_default: float | None = None if recipe_defaults else 1e-4
    warmup_default: int | None = None if recipe_defaults else 5
    default_text = f"default: {recipe_defaults}" if recipe_defaults else "default: %(default)s"
    parser.add_argument("-d", "--dir", type=Path, required=True, help=dir_help)
    parser.add_argument(
        "--epochs",
        type=positive_int,
        default=100,
        help="total number of epochs; one epoch is one pass over the training set by all ranks together "
        "(default: %(default)s, the tutorial's budget)",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=32,
        help="batch size per rank; the global batch is this x ranks (default: %(default)s)",
    )
    parser.add_argument(
        "--lr",
        type=positive_float,
        default=lr_default,
        help=f"base learning rate per rank; the optimizer uses lr x ranks ({default_text})",
    )
    parser.add_argument(
        "--decay",
        type=float,
        default=1e-6,
        help="RMSprop time-based decay, Keras 2 semantics lr / (1 + decay x step) (default: %(default)s)",
    )
    parser.add_argument(
        "--warmup-epochs",
        type=non_negative_int,
        default=warmup_default,
        help=f"{warmup_help} ({default_text})",
    )
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        default="cifar10",
        help="cifar10 (default), or scikit-learn's 8x8 digits upscaled to 32x32x3 and split 80/20 with a "
        "fixed seed: a small, offline stand-in for quick runs",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"directory holding {CIFAR_ARCHIVE} (read without extracting) or the extracted {CIFAR_FOLDER}/; "
        "without it the set is downloaded by tf.keras.datasets.cifar10 (needs network access)",
    )
    parser.add_argument(
        "--no-augmentation",
        action="store_true",
        help="train without the random shifts (up to 10%%) and horizontal flips",
    )
    parser.add_argument("--mixed-precision", action="store_true", help=mixed_precision_help)
    parser.add_argument(
        "--seed",
        type=seed_value,
        default=None,
        help="seed for Python, numpy, the framework, shuffling and augmentation, for reproducible runs "
        "(default: a random seed chosen by rank 0)",
    )
    parser.add_argument(
        "--max-train-samples",
        type=positive_int,
        default=None,
        help="use only the first N training images (quick runs)",
    )
    parser.add_argument(
        "--max-test-samples",
        type=positive_int,
        default=None,
        help="use only the first N test images (quick runs)",
    )
    parser.add_argument(
        "--save-rank-weights",
        action="store_true",
        help="at the end, every rank writes the SHA-256 of its weights to <dir>/rank-<r>.weights.sha256 "
        "(checks that all ranks hold the same model)",
    )
