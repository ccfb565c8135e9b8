"""Run folders as the trainer leaves them, written by hand for the tests of checkpoints and resumes."""

from __future__ import annotations

from pathlib import Path


def checkpoint_folders(root: Path, *iterations: int) -> None:
    """Minimal checkpoint folders ``checkpoint-<iteration>`` in ``root`` (a ``train_state.json`` each, enough for
    ``latest`` to count them complete), ``latest`` naming the highest."""
    for iteration in iterations:
        (root / f"checkpoint-{iteration:08d}").mkdir(parents=True)
        (root / f"checkpoint-{iteration:08d}" / "train_state.json").write_text("{}\n")
    (root / "latest").write_text(f"checkpoint-{max(iterations):08d}")
