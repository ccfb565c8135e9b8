"""``--resume``: which checkpoint, which run folder, and which flags.

What ``--resume`` accepts: ``auto`` (the latest checkpoint of ``--output-dir/--name``), a run folder, a checkpoint
folder, or a weights file of a run (``<run>/weights/last.safetensors``, as Ultralytics resumes from ``last.pt``).

The run folder is only ever the one ``--output-dir/--name`` names, or the run that owns the checkpoint. A run owns a
checkpoint when the checkpoint lies in its ``checkpoints/`` folder and the run's ``config.yaml`` is beside it:
recognised positively, never guessed from the path alone, so that a checkpoint copied to ``<dir>/ck`` does not make
``<dir>``'s parent a run folder (whose ``checkpoint-*`` folders pruning would delete).

Every flag the user did not type is read from the checkpoint's saved config; only typed flags are compared with it
(``checkpoint.check_resume_config``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from yolo11.engine.checkpoint import resolve_resume
from yolo11.engine.config import LOCAL, TrainConfig, flags_with_rule
from yolo11.engine.run_state import CONFIG_FILE, RUN_CONFIG, checkpoint_root
from yolo11.gate import read_json


@dataclass(frozen=True)
class ResumeTarget:
    checkpoint: Path | None  # None: --resume auto before the run's first checkpoint
    owner: Path | None  # the run folder that holds the checkpoint; None: a checkpoint outside a run


def owning_run(checkpoint: Path) -> Path | None:
    """The run folder whose ``checkpoints/`` holds ``checkpoint`` (with the run's ``config.yaml``), else None."""
    checkpoint = checkpoint.resolve()
    run = checkpoint.parent.parent
    if checkpoint.parent.name == checkpoint_root(run).name and (run / RUN_CONFIG).is_file():
        return run
    return None


def locate_resume(resume: str, output_dir: str, name: str) -> ResumeTarget:
    """The checkpoint ``--resume`` names and the run that owns it; raises ``FileNotFoundError`` (one line) when
    there is no checkpoint there."""
    if resume == "auto":
        run = Path(output_dir) / name
        return ResumeTarget(resolve_resume("auto", run, missing_ok=True), run)
    path = Path(resume)
    if path.is_file():
        run = path.resolve().parent.parent
        if path.resolve().parent.name != "weights" or not (run / RUN_CONFIG).is_file():
            raise FileNotFoundError(f"--resume {resume}: a file resumes only as a run's weights/last.safetensors "
                                    "(the run's latest checkpoint is then resumed); pass a run folder or a "
                                    "checkpoint folder")
        path = run
    checkpoint = resolve_resume(str(path), path)
    return ResumeTarget(checkpoint, owning_run(checkpoint))


def saved_config(checkpoint: Path) -> dict | None:
    """The resolved config a checkpoint was trained with (``TrainConfig.to_dict()``), None when it has none."""
    path = checkpoint / CONFIG_FILE
    if not path.is_file():
        return None
    values = read_json(path)  # the loading gate: one line naming the file for anything it refuses
    if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
        raise ValueError(f"--resume: {path}: expected a mapping of config sections")
    return values


def resumed_config(config: TrainConfig, typed: frozenset[str], saved: dict | None) -> TrainConfig:
    """``config`` with every flag not in ``typed`` (and not declared ``LOCAL``: where this invocation writes, how it
    resumes, where it stops) taken from ``saved``."""
    if saved is None:
        return config
    keep = typed | flags_with_rule(LOCAL)
    current = config.to_dict()
    merged = {section: {key: value if key in keep else saved.get(section, {}).get(key, value)
                        for key, value in values.items()} for section, values in current.items()}
    try:
        return TrainConfig.from_dict(merged)
    except (TypeError, ValueError) as err:
        raise ValueError(f"--resume: the checkpoint's saved config is not valid here ({err})") from None


def resume_run_dir(target: ResumeTarget, typed: frozenset[str], output_dir: str, name: str) -> Path | None:
    """The run folder to continue in: the owner, unless ``--output-dir``/``--name`` were typed and name another
    folder (the run continues there, a fork); None: a new folder from ``--output-dir/--name``."""
    if target.owner is None:
        return None
    named = (Path(output_dir) / name).resolve()
    if typed & {"output_dir", "name"} and named != target.owner.resolve():
        return None
    return target.owner


@dataclass(frozen=True)
class Resume:
    """What ``--resume`` resolved to."""

    checkpoint: Path | None  # None: --resume auto before the run's first checkpoint
    run_dir: Path | None  # the run folder that owns the checkpoint; None: a new folder from --output-dir/--name
    architecture_saved: bool  # the checkpoint's config names the architecture: no initial weights to load


def prepare_resume(config: TrainConfig, typed: frozenset[str] | None) -> tuple[TrainConfig, Resume | None]:
    """The config of a resumed run (the checkpoint's for every flag not in ``typed``; None: every flag counts as
    typed) and where it resumes from; ``(config, None)`` without ``--resume``."""
    run = config.run
    if not run.resume:
        return config, None
    target = locate_resume(run.resume, run.output_dir, run.name)
    if typed is None:
        typed = frozenset(f for section in config.to_dict().values() for f in section)
    saved = saved_config(target.checkpoint) if target.checkpoint is not None else None
    config = resumed_config(config, typed, saved)
    run_dir = resume_run_dir(target, typed, run.output_dir, run.name)
    if run_dir is not None:  # the config records where the run lives: the saved words for it where they fit
        before = (saved or {}).get("run", {})
        for where in ({"output_dir": run.output_dir, "name": run.name},
                      {"output_dir": before.get("output_dir"), "name": before.get("name")},
                      {"output_dir": str(run_dir.parent), "name": run_dir.name}):
            if None not in where.values() and (Path(where["output_dir"]) / where["name"]).resolve() == \
                    run_dir.resolve():
                config = dataclasses.replace(config, run=dataclasses.replace(config.run, **where))
                break
    return config, Resume(target.checkpoint, run_dir, saved is not None)
