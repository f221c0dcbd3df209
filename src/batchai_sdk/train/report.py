"""What both training scripts tell the user and leave behind the same way, whatever the framework: the
augmentation line, the final test scores, the saved model's folder, the per-rank weight hashes."""

from __future__ import annotations

import argparse
from pathlib import Path

from .cli_args import RECIPES


def augmentation_text(args: argparse.Namespace) -> str:
    """``off``, ``shifts`` or ``shifts and flips``: what this run's dataset recipe and flags do."""
    if args.no_augmentation:
        return "off"
    return "shifts and flips" if RECIPES[args.dataset].flip else "shifts"


def print_test_scores(loss: float, accuracy: float) -> None:
    """Rank 0's last lines: ``Test loss: 0.1234`` and ``Test accuracy: 0.9567`` (the tutorial's words)."""
    print(f"Test loss: {float(loss):.4f}", flush=True)
    print(f"Test accuracy: {float(accuracy):.4f}", flush=True)


def saved_model_path(out_dir: Path, file_name: str) -> Path:
    """``<dir>/saved_models/<file_name>``, its folder created."""
    folder = out_dir / "saved_models"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / file_name


def write_rank_weights(out_dir: Path, rank: int, sha256: str) -> None:
    """``<dir>/rank-<r>.weights.sha256``: every rank's weights hash, to check that all hold one model."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"rank-{rank}.weights.sha256").write_text(sha256 + "\n", encoding="utf-8")
