"""The ``dr-kernel`` command line: one module per command (replay, train, db and report,
evaluate, tune, sweep, retune, check, collect, tune-many), what they share in common.py, and here the
parser and main()."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from . import check, collect, db, evaluate, replay, retune, sweep, train, tune, tune_many
from .common import UsageError


def cmd_strategies(args: argparse.Namespace) -> int:
    from .. import _core

    for name, description, options in _core.strategies():
        print(f"{name}: {description}")
        for opt, text, default in options:
            print(f"    {opt} (default {default:g}): {text}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dr-kernel", description="Auto-tuning of Triton GPU kernels.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (replay, db, train, evaluate, tune, sweep, retune, check, collect, tune_many):
        command.add_parser(sub)

    p = sub.add_parser("strategies", help="list the search strategies and their options")
    p.set_defaults(func=cmd_strategies)
    return parser


# What an interrupted command leaves behind, said when it is interrupted.
INTERRUPTED = {
    "tune": "every result measured so far is in the store",
    "evaluate": "every result measured so far is in the store",
    "replay": "nothing was written (a replay only reads its tables)",
    "train": "no agent file was written; those in --out are as they were",
    "report": "nothing was written",
    "retune": "what the program re-tuned before it stopped is in the store",
    "check": "the baseline is as it was",
    "collect": "the launches recorded so far are in the work list",
    "tune-many": "every key tuned so far is in the store; run the same command again to go on",
}


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "db" and not any(x.startswith("-") for x in extra):
        # argparse gives `db export --format kernel_tuner OUT` no files (its list ends at the option): the
        # files after the options are the command's files too.
        from pathlib import Path

        args.files += [Path(x) for x in extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if threading.current_thread() is threading.main_thread():
        # `timeout` and job schedulers stop a run with SIGTERM: unwind as for Ctrl-C, so that the
        # worker processes (and the ptxas they run) are stopped and the rows written are kept.
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"dr-kernel {args.command}: interrupted; {INTERRUPTED.get(args.command, 'what it wrote before is kept')}",
              file=sys.stderr)
        return 130
    except UsageError as e:
        print(f"dr-kernel {args.command}: {e}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:  # The engine's errors about user input (data file, space, store).
        print(f"dr-kernel {args.command}: {e}", file=sys.stderr)
        return 2
