"""``--resume``: which checkpoint, which run folder, and which flags.

What ``--resume`` accepts: ``auto`` (Ultralytics' ``yolo train resume`` and ``resume=True`` too), a run folder, a
checkpoint folder, or a weights file of a run (``<run>/weights/last.safetensors``, as Ultralytics resumes from
``last.pt``; the file need not be written yet). ``auto`` with ``--name`` takes that run's latest checkpoint and
starts it afresh when it has none (a requeued job); without ``--name`` it takes the newest unfinished run under
``--output-dir`` (by the time of its latest checkpoint) and says which, and refuses when there is none. A run whose
last epoch is done (or that patience stopped) is finished: resuming it is an error that shows how to train longer.

The run folder is only ever the one ``--output-dir/--name`` names, or the run that owns the checkpoint. A run owns a
checkpoint when the checkpoint lies in its ``checkpoints/`` folder and the run's ``config.yaml`` is beside it:
recognised positively, never guessed from the path alone, so that a checkpoint copied to ``<dir>/ck`` does not make
``<dir>``'s parent a run folder (whose ``checkpoint-*`` folders pruning would delete).

Every flag the user did not type is read from the checkpoint's saved config; only typed flags are compared with it
(``checkpoint.check_resume_config``).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yolo11.engine.checkpoint import latest_checkpoint, resolve_resume
from yolo11.engine.config import LOCAL, TrainConfig, flags_with_rule
from yolo11.engine.process_group import find_launcher, parent_process
from yolo11.engine.run_state import CONFIG_FILE, RUN_CONFIG, STATE_FILE, checkpoint_root
from yolo11.gate import read_json


@dataclass(frozen=True)
class ResumeTarget:
    checkpoint: Path | None  # None: --resume auto before the run's first checkpoint
    owner: Path | None  # the run folder that holds the checkpoint; None: a checkpoint outside a run
    note: str | None = None  # which run ``auto`` found, said in one line


def owning_run(checkpoint: Path) -> Path | None:
    """The run folder whose ``checkpoints/`` holds ``checkpoint`` (with the run's ``config.yaml``), else None; in
    the words of ``checkpoint`` (a relative path stays relative, for the commands printed) unless they climb."""
    resolved = checkpoint.resolve()
    run = resolved.parent.parent
    if resolved.parent.name == checkpoint_root(run).name and (run / RUN_CONFIG).is_file():
        return run if ".." in checkpoint.parts else checkpoint.parent.parent
    return None


def locate_resume(resume: str, output_dir: str, name: str, search: bool = False) -> ResumeTarget:
    """The checkpoint ``--resume`` names and the run that owns it; raises ``FileNotFoundError`` (one line) when
    there is no checkpoint there. ``search``: ``auto`` takes the newest unfinished run under ``output_dir`` rather
    than ``output_dir/name``."""
    if resume == "auto":
        if search:
            return newest_unfinished_run(Path(output_dir))
        run = Path(output_dir) / name
        return ResumeTarget(resolve_resume("auto", run, missing_ok=True), run)
    path = Path(resume)
    run = path.parent.parent
    if path.is_file() or (path.parent.name == "weights" and path.suffix and (run / RUN_CONFIG).is_file()):
        if path.resolve().parent.name != "weights" or not (run / RUN_CONFIG).is_file():
            raise FileNotFoundError(f"--resume {resume}: a file resumes only as a run's weights/last.safetensors "
                                    "(the run's latest checkpoint is then resumed); pass a run folder or a "
                                    "checkpoint folder")
        path = run
    checkpoint = resolve_resume(str(path), path)
    return ResumeTarget(checkpoint, owning_run(checkpoint))


@dataclass(frozen=True)
class RunProgress:
    """How far a checkpoint's run got: epochs done, batches of the next one, the best epoch (0-based, -1: none)."""

    epochs_done: int
    batches_in_epoch: int
    best_epoch: int


def read_progress(checkpoint: Path) -> RunProgress | None:
    """The checkpoint's ``train_state.json`` counters, None when they cannot be read (the resume's full checks
    then say why)."""
    try:
        state = read_json(checkpoint / STATE_FILE)
    except (OSError, ValueError):  # FileRefusedError is a ValueError
        return None
    values = [state.get(key) for key in ("epoch", "batches_in_epoch", "best_epoch")] if isinstance(state, dict) else []
    return RunProgress(*values) if len(values) == 3 and all(type(v) is int for v in values) else None


def finished(progress: RunProgress | None, epochs: int, patience: int) -> str | None:
    """How the run ended ("finished all 3 epochs"), None while it has epochs left to train."""
    if progress is None or progress.batches_in_epoch:
        return None
    done, best = progress.epochs_done, progress.best_epoch
    if done == epochs:
        return f"finished all {epochs} epochs"
    if done > epochs:  # a typed --epochs below what the run has trained
        return f"has trained {done} epochs, more than the {epochs} asked"
    if patience and best >= 0 and done - 1 - best >= patience:  # RunOutputs.may_stop: patience ended the run
        return (f"was stopped by --patience {patience} after epoch {done} of {epochs} (no better fitness since epoch "
                f"{best + 1})")
    return None


def train_longer(target: Path, how: str, epochs: int, epochs_done: int) -> str:
    """The command that trains the run (or checkpoint) ``target``, which ended as ``how`` says, longer: twice the
    epochs it has trained (not twice a typed ``epochs`` below them, which would end the same way)."""
    if epochs_done >= epochs:
        more = {"epochs": 2 * epochs_done, "allow_changes": "true"}
    else:  # stopped by patience: without it the run goes on to its --epochs
        more = {"patience": 0, "allow_changes": "true"}
    return f"To train longer: {resume_command(target, **more)}"


def newest_unfinished_run(output_dir: Path) -> ResumeTarget:
    """The newest run under ``output_dir`` (by its latest checkpoint's time) whose last epoch is not done;
    ``FileNotFoundError`` saying so when there is none (never a new run)."""
    runs = []
    for run in output_dir.iterdir() if output_dir.is_dir() else ():
        checkpoint = latest_checkpoint(run) if (run / RUN_CONFIG).is_file() else None
        if checkpoint is not None:
            runs.append(((checkpoint / STATE_FILE).stat().st_mtime, run, checkpoint))
    newest_finished = None
    for _, run, checkpoint in sorted(runs, key=lambda item: item[0], reverse=True):
        progress, saved = read_progress(checkpoint), saved_config_or_none(checkpoint)
        epochs, patience = (saved.get("run", {}).get(key) for key in ("epochs", "patience")) if saved else (0, 0)
        how = finished(progress, epochs, patience) if type(epochs) is int and type(patience) is int else None
        if how is None:  # unfinished, or unreadable: the resume's checks then say what is wrong with it
            done = "" if progress is None else f": {progress.epochs_done}/{epochs} epochs done"
            return ResumeTarget(checkpoint, run, f"resume: {run}, the newest unfinished run in {output_dir}{done}")
        newest_finished = newest_finished or (run, how, epochs, progress.epochs_done)
    if newest_finished is None:
        raise FileNotFoundError(f"nothing to resume: no run in {output_dir} has a checkpoint (train one first, or "
                                "name the run: resume model=<run>/weights/last.safetensors)")
    run, how, epochs, done = newest_finished
    raise FileNotFoundError(f"no unfinished run in {output_dir} to resume: the newest, {run}, "
                            f"{how}. {train_longer(run, how, epochs, done)}")


def resume_command(run: Path, **changes: Any) -> str:
    """The command that resumes ``run`` with ``changes`` (``epochs=6``), as this process was started: under
    ``accelerate launch`` or torchrun, the launcher's words and the script with ``--resume <run>``; as
    ``yolo11-train``, ``python -m yolo11.train`` or a script, the same with ``--resume``; otherwise (``yolo11
    train``, the Python API) Ultralytics' form, ``yolo11 train resume model=<run>/weights/last.safetensors``."""
    flags = [word for key, value in changes.items() for word in (f"--{key.replace('_', '-')}", str(value))]
    launcher = _launcher_words()
    program = sys.argv[0] if sys.argv else ""
    if launcher is not None:
        words = [*_launch_environment(), *launcher, "--resume", str(run), *flags]
    elif program.endswith("yolo11-train"):  # the console script, on the PATH
        words = ["yolo11-train", "--resume", str(run), *flags]
    elif program.endswith("train_accelerate.py"):
        words = ["python", program, "--resume", str(run), *flags]
    elif Path(program).parts[-2:] == ("yolo11", "train.py"):
        words = ["python", "-m", "yolo11.train", "--resume", str(run), *flags]
    else:
        words = ["yolo11", "train", "resume", f"model={Path(run) / 'weights' / 'last.safetensors'}",
                 *(f"{key}={value}" for key, value in changes.items())]
    return shlex.join(words)


# Variables of the launcher's environment that the launch depends on (README: cpu_2proc.yaml needs the first)
LAUNCH_ENVIRONMENT = ("ACCELERATE_USE_CPU", "CUDA_VISIBLE_DEVICES", "YOLO11_SHARE_GPU")


def _launch_environment() -> list[str]:
    """``NAME=value`` words of ``LAUNCH_ENVIRONMENT`` as the launcher process had them (the user's, not those
    the launcher sets for its children), so that the printed command starts the same processes."""
    try:
        environment = parent_process().environ()
    except Exception:  # noqa: BLE001 - psutil.Error, or no parent: gone, or not ours to read
        return []
    return [f"{name}={environment[name]}" for name in LAUNCH_ENVIRONMENT if environment.get(name)]


def _launcher_words() -> list[str] | None:
    """``accelerate launch <options> <script>`` (or torchrun's, yolo11-launch's, ``python -m`` forms included) as
    the launcher that started this process was typed, without the trainer's arguments; None when no launcher
    started it."""
    parent = parent_process()
    try:
        words = parent.cmdline()
    except Exception:  # noqa: BLE001 - psutil.Error, or no parent: gone, or not ours to read
        return None
    launcher = find_launcher(words)
    trainer_args = sys.argv[1:]
    end = len(words) - len(trainer_args)
    if launcher is None or end <= launcher.start or words[end:] != trainer_args:
        return None
    return [os.path.basename(words[launcher.start]), *words[launcher.start + 1:end]]


def saved_config(checkpoint: Path) -> dict | None:
    """The resolved config a checkpoint was trained with (``TrainConfig.to_dict()``), None when it has none."""
    path = checkpoint / CONFIG_FILE
    if not path.is_file():
        return None
    values = read_json(path)  # the loading gate: one line naming the file for anything it refuses
    if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
        raise ValueError(f"--resume: {path}: expected a mapping of config sections")
    return values


def saved_config_or_none(checkpoint: Path) -> dict | None:
    """``saved_config``, None for a file the gate refuses (the resume itself then says why)."""
    try:
        return saved_config(checkpoint)
    except (OSError, ValueError):
        return None


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
    note: str | None = None  # which run ``auto`` found: the trainer prints it


def prepare_resume(config: TrainConfig, typed: frozenset[str] | None) -> tuple[TrainConfig, Resume | None]:
    """The config of a resumed run (the checkpoint's for every flag not in ``typed``; None: every flag counts as
    typed) and where it resumes from; ``(config, None)`` without ``--resume``."""
    run = config.run
    if not run.resume:
        return config, None
    if typed is None:
        typed = frozenset(f for section in config.to_dict().values() for f in section)
    search = run.resume == "auto" and "name" not in typed  # `yolo11 train resume`: the newest unfinished run
    target = locate_resume(run.resume, run.output_dir, run.name, search=search)
    saved = saved_config(target.checkpoint) if target.checkpoint is not None else None
    config = resumed_config(config, typed, saved)
    if target.checkpoint is not None:
        progress = read_progress(target.checkpoint)
        how = finished(progress, config.run.epochs, config.run.patience)
        if how is not None:
            where = target.owner if target.owner is not None else target.checkpoint
            more = train_longer(where, how, config.run.epochs, progress.epochs_done)
            raise ValueError(f"{where} {how}; nothing to resume. {more}")
    run_dir = target.owner if search else resume_run_dir(target, typed, run.output_dir, run.name)
    if run_dir is not None:  # the config records where the run lives: the saved words for it where they fit
        before = (saved or {}).get("run", {})
        for where in ({"output_dir": run.output_dir, "name": run.name},
                      {"output_dir": before.get("output_dir"), "name": before.get("name")},
                      {"output_dir": str(run_dir.parent), "name": run_dir.name}):
            if None not in where.values() and (Path(where["output_dir"]) / where["name"]).resolve() == \
                    run_dir.resolve():
                config = dataclasses.replace(config, run=dataclasses.replace(config.run, **where))
                break
    return config, Resume(target.checkpoint, run_dir, saved is not None, target.note)
