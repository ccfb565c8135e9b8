"""``accelerate launch`` that exits with the trainer's own exit code.

    python -m yolo11.launch --config_file accelerate_configs/4gpu.yaml -m yolo11.train --data ... (yolo11-launch)

Same arguments, same launcher (Accelerate's own ``launch_command``, in this process). What differs is the end of a
failed run: ``accelerate launch`` turns every non-zero exit of a single process into a ``CalledProcessError``
traceback that repeats the trainer's stderr (``-q``: exit 1 without it), and a failed torch elastic worker into a
``ChildFailedError`` (exit 1). Here the trainer's one-line error stays the last thing printed and the job exits
with the trainer's code: 2 for a user error, 130/143 for a stop signal, 1 for a crash (whose traceback the trainer
printed itself). The code is the first failed process's: the others were stopped by the launcher because of it.
"""

from __future__ import annotations

import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    from accelerate.commands.launch import launch_command, launch_command_parser
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = launch_command_parser().parse_args(sys.argv[1:] if argv is None else argv)
    args.quiet = False  # the launcher raises what failed, and the code is taken from it
    try:
        launch_command(args)
    except subprocess.CalledProcessError as failed:  # one process: its stderr was already passed through
        return exit_code(failed.returncode)
    except ChildFailedError as failed:  # torch elastic: the first process to fail, by time
        # not the lowest rank: when rank 1 fails, elastic stops rank 0 with SIGTERM, and its 143 would read as a
        # preemption (ties in the one-second timestamps go to the order in which elastic saw the exits)
        _, first = failed.get_first_failure()
        return exit_code(first.exitcode)
    return 0


def exit_code(returncode: int) -> int:
    """A worker killed by a signal (negative return code) exits as a shell reports it, 128 + the signal."""
    return 128 - returncode if returncode < 0 else returncode


if __name__ == "__main__":
    from yolo11.program_exit import exit_process

    exit_process(main())
