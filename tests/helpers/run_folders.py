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


def rewind(run: Path, checkpoint: str) -> None:
    """Take a copied run back to its ``checkpoint`` (say ``checkpoint-00000006``, after epoch 1 of the suite's tiny
    run): the later checkpoints deleted and ``latest`` naming it, so that the run is unfinished and resumable again
    (a finished run is not). results.csv keeps its later rows: a resume drops the rows after its epoch."""
    import shutil

    checkpoints = run / "checkpoints"
    assert (checkpoints / checkpoint).is_dir(), f"no {checkpoint} in {checkpoints}"
    for folder in checkpoints.glob("checkpoint-*"):
        if folder.name > checkpoint:
            shutil.rmtree(folder)
    (checkpoints / "latest").write_text(checkpoint)
