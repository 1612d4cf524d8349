"""``python -m dr_kernel run [--widen] [--isolate] [--defer] SCRIPT [ARGS...]`` (or ``run ... -m MODULE ...``):
run a program with dr_kernel in place of triton.autotune, for every library it imports. Anything
else goes to the dr-kernel command line (``python -m dr_kernel replay ...``)."""

from __future__ import annotations

import runpy
import sys


def run_program(argv: list[str]) -> int:
    usage = ("usage: python -m dr_kernel run [--widen] [--isolate] [--defer] SCRIPT [ARGS...] | "
             "run [--widen] [--isolate] [--defer] -m MODULE [ARGS...]")
    widen, isolate, defer = False, False, False
    # --narrow, the default, is accepted too.
    while argv and argv[0] in ("--widen", "--narrow", "--isolate", "--defer"):
        widen = widen or argv[0] == "--widen"
        isolate = isolate or argv[0] == "--isolate"
        defer = defer or argv[0] == "--defer"
        argv = argv[1:]
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        print(usage, file=sys.stderr)
        return 2
    from .switch import install

    # --isolate: measure in a measuring process wherever a kernel can go there (install(isolate=None)).
    # --defer: each key is tuned on a later call than its first (install(defer=True)).
    install(widen=widen, isolate=None if isolate else False, defer=defer)
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        return run_program(sys.argv[2:])
    from .cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
