"""`dr-kernel collect`: run a program without tuning and write each distinct launch to a work list."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from .common import UsageError, program_argument, program_command


def cmd_collect(args: argparse.Namespace) -> int:
    from .. import switch
    from ..collect import ENV, read_work

    command = program_command(args)
    if not command:
        raise UsageError("give the program to run after --, e.g. dr-kernel collect -o work.jsonl -- python train.py")
    out = args.out.resolve()
    before = len(read_work(out)) if out.is_file() else 0
    env = dict(os.environ, **{ENV: str(out)})
    if not args.no_switch and not switch.requested(env):
        env[switch.ENV_VARIABLE] = "1"  # Library kernels' triton.autotune is dr_kernel's too, so they are seen.
    if args.db:
        env["DR_KERNEL_DB"] = str(args.db)
    done = subprocess.run(command, env=env)
    entries = read_work(out) if out.is_file() else []
    keys = {e["store_key"] for e in entries}
    kernels = {e["kernel"].get("function") for e in entries}
    print(f"{out}: {len(entries) - before} new entries, {len(entries)} in all ({len(keys)} keys of {len(kernels)} "
          f"kernels); tune them with: dr-kernel tune-many {args.out}")
    if done.returncode != 0:
        print(f"dr-kernel collect: the program exited with status {done.returncode}; the launches it made before "
              "are in the work list", file=sys.stderr)
    return done.returncode


def add_parser(sub) -> None:
    p = sub.add_parser("collect", help="run a program without tuning and list every kernel launch to tune (for "
                                       "tune-many)",
                       description="Runs the program with every dr_kernel kernel (and, through the drop-in switch, "
                                   "every @triton.autotune kernel) launching its stored winner or its first config, "
                                   "measuring nothing, and appends each distinct launch (kernel, key, argument "
                                   "shapes, dtypes, strides, other arguments) to the work list.")
    p.add_argument("-o", "--out", type=Path, required=True, help="the work list (JSON lines) to append to")
    p.add_argument("--db", type=Path, help="the store whose winners are launched (default: $DR_KERNEL_DB or the "
                                           "per-user cache)")
    p.add_argument("--no-switch", action="store_true",
                   help="leave triton.autotune kernels to Triton (only @optimize and dr_kernel.autotune kernels)")
    program_argument(p)
    p.set_defaults(func=cmd_collect)
