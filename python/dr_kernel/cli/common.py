"""What the commands share: argument parsing and checking, tables, kernels, devices, progress."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import bundled_tables


class UsageError(Exception):
    """A mistake in the command line or its inputs; printed as one line, exit status 2."""


def _parse_options(pairs: Sequence[str]) -> dict[str, float]:
    options = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            options[name] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise UsageError(f"--option {pair!r}: write NAME=NUMBER, e.g. --option t0=0.2")
    return options


def _check_range(args: argparse.Namespace, **bounds: tuple[float, float]) -> None:
    """Raises one UsageError unless each named option (given, not None) lies in its (low, high) range;
    NaN and infinities lie in none. The option is named as on the command line."""
    for name, (low, high) in bounds.items():
        value = getattr(args, name)
        if value is not None and not low <= value <= high:
            span = f"at least {_shown(low)}" if high == MAX else f"from {_shown(low)} to {_shown(high)}"
            raise UsageError(f"--{name.replace('_', '-')} {value if isinstance(value, int) else _shown(value)}: "
                             f"give a number {span}")


def _shown(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else f"{value:,}"


MAX = sys.float_info.max  # The upper bound of _check_range for "any finite number".


SEED = (0, 2**63 - 1)  # Seeds are unsigned 64-bit numbers in the engine; runs use seed, seed + 1, ...


BUDGET = (1, 100_000)  # Evaluations: beyond any recorded space, and what replay's curves can hold.


MIN_TRAINING_ROWS = 200  # Fewer measured rows than this train a cost model and an agent on nothing.


def _read_tables(data: list[Path] | None) -> tuple[list[str], list]:
    """The paths and tables of --data (default: the bundled tables); a folder, a missing, empty or
    special file, or files without one recorded row are refused, each in one sentence."""
    from .. import _core

    paths = data or bundled_tables()
    for p in paths:
        if p.is_dir():
            raise UsageError(f"--data {p} is a folder; give the tables in it, e.g. --data {p / '*.jsonl'}")
        problem = ("does not exist" if not p.exists() else "is not a regular file" if not p.is_file()
                   else "is empty" if p.stat().st_size == 0 else "")
        if problem:
            raise UsageError(f"--data {p} {problem}; give recorded tables (JSON lines, as dr-kernel sweep writes)")
    tables = _core.read_tables([str(p) for p in paths])
    if not tables:
        raise UsageError(f"--data {' '.join(map(str, paths))} holds no recorded rows; give tables as dr-kernel "
                         "sweep writes them")
    return [str(p) for p in paths], tables


def _label(problem: dict) -> str:
    return " ".join([problem["family"], *(f"{k}={v}" for k, v in problem["shape"].items()), problem["dtype"]]).strip()


def _strategy_names(text: str) -> list[str]:
    from .. import _core

    available = [s[0] for s in _core.strategies()]
    names = available if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in available:
            raise UsageError(f"unknown strategy {name!r}; the available strategies are: {', '.join(available)}")
    return names


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _builtin(name: str):
    from ..kernels import UnknownKernelError, get

    try:
        return get(name)
    except UnknownKernelError as e:
        raise UsageError(str(e)) from None


def _parse_value(text: str, like: Any) -> Any:
    lowered = text.strip().lower()
    if isinstance(like, bool) or lowered in ("true", "false"):
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise ValueError(text)
    return int(text)


def _parse_shape(kernel, text: str | None) -> dict:
    if not text:
        return dict(kernel.shapes[0])
    like = kernel.shapes[0]
    shape = {}
    for pair in text.split(","):
        name, sep, value = pair.partition("=")
        name = name.strip()
        if name in shape:
            raise UsageError(f"--shape {text!r} gives {name} twice; give each key once")
        try:
            if not sep or not name:
                raise ValueError(pair)
            shape[name] = _parse_value(value, like.get(name))
        except ValueError:
            raise UsageError(f"--shape {text!r}: write KEY=INTEGER pairs separated by commas, e.g. "
                             + ",".join(f"{k}={v}" for k, v in like.items())) from None
        if not isinstance(shape[name], bool) and shape[name] < 1:
            raise UsageError(f"--shape {name}={shape[name]}: sizes are whole numbers of at least 1")
    try:
        return kernel.check_shape(shape)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _parse_json(text: str, flag: str, example: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise UsageError(f"{flag} is not valid JSON ({e}); write e.g. {flag} '{example}'") from None


def _parse_config(kernel, text: str) -> dict:
    example = json.dumps(next(iter(kernel.configs())))
    config = _parse_json(text, "--config", example)
    if not isinstance(config, dict):
        raise UsageError(f"--config must be a JSON object of parameter values, e.g. --config '{example}'")
    try:
        config = kernel.check_config(config)
    except ValueError as e:
        raise UsageError(str(e)) from None
    _check_values(kernel, "--config", {k: [v] for k, v in config.items()}, f"--config '{example}'")
    return config


def _check_values(kernel, flag: str, values: dict[str, list], example: str) -> None:
    """Block sizes, warps and stages are whole numbers of at least 1, a kernel's switches (attention's
    TMA) 0 or more: one UsageError naming the first other."""
    for name, listed in values.items():
        least = 0 if 0 in kernel.space.get(name, ()) else 1
        bad = [v for v in listed if isinstance(v, bool) or not isinstance(v, int) or v < least]
        if bad:
            raise UsageError(f"{flag}: {name} = {json.dumps(bad[0])} is not a whole number of at least {least}; "
                             f"write e.g. {example}")


def _parse_space(kernel, text: str | None):
    """The --space override: a JSON object of value lists over the kernel's parameters."""
    from ..space import make_space

    if text is None:
        return None
    example = json.dumps({k: v[:2] for k, v in kernel.space.items()})
    space = _parse_json(text, "--space", example)
    if not isinstance(space, dict) or not all(isinstance(v, list) and v for v in space.values()):
        raise UsageError("--space must be a JSON object mapping each parameter to a list of values")
    _check_values(kernel, "--space", space, f"--space '{example}'")
    try:
        kernel.check_config({k: v[0] for k, v in space.items()})
        return make_space(space, constraints=kernel.constraints)
    except ValueError as e:
        raise UsageError(f"--space: {e}") from None


def _gpu_available() -> bool:
    from ..measure import visible_devices

    return visible_devices() != ["cpu"]


def _limits(gpu: bool):
    from ..analysis import H200, device_limits

    return device_limits(0) if gpu else H200


def _named_limits(name: str):
    from ..analysis import named_limits

    try:
        return named_limits(name)
    except ValueError as e:
        raise UsageError(f"--device: {e}") from None


def _machine_memory_bytes() -> int:
    """This machine's memory, where the interpreter's problems live."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _check_size(kernel, shape: dict, dtype: str, interpret: bool, measuring: bool = True, limits=None) -> None:
    """Refuses a problem whose tensors exceed the memory that would hold them: this machine's
    when it is measured in the interpreter, the GPU's (`limits`, the device it is analysed for or
    measured on: default the visible GPU's, or the H200's under the interpreter) in any case, since
    no such GPU could run it. Notes a large problem for the interpreter."""
    need = kernel.bytes(shape, dtype)
    written = ",".join(f"{k}={v}" for k, v in shape.items())

    def refuse(where: str, have: int) -> None:
        raise UsageError(f"--shape {written}: its tensors take at least {need / 1e9:,.0f} GB, more than {where} "
                         f"({have / 1e9:,.0f} GB); give a smaller --shape")

    if measuring and interpret and need > _machine_memory_bytes():
        refuse("this machine's memory", _machine_memory_bytes())
    if limits is None:
        limits = _limits(not interpret)
    if limits.memory_bytes and need > limits.memory_bytes:
        refuse(f"the memory of the {limits.name}", limits.memory_bytes)
    # The interpreter runs a kernel as NumPy on the CPU, program by program: slow beyond toy sizes.
    if interpret and kernel.flops(shape) > 1e7:
        print(f"note: {kernel.name} {shape} has {kernel.flops(shape):.2g} FLOPs, a lot for Triton's interpreter; "
              "give a small --shape to finish in seconds", file=sys.stderr)


NO_GPU = ("measuring needs a GPU and none is visible; add --interpret to run the whole flow in Triton's "
          "interpreter on the CPU (small shapes only: its times order configs for testing, they are not GPU times)")


INTERPRETER_NOTE = "interpreter times (CPU): they order configs for testing; they are not GPU times"


def _core_device_name() -> str:
    from ..session import device_name

    return device_name(False)


def _kernel_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", required=True,
                   help="a built-in kernel, e.g. matmul, softmax, attention, rmsnorm (an unknown name lists them all)")
    p.add_argument("--shape", help="the problem as KEY=VALUE pairs, e.g. M=4096,N=4096,K=4096 "
                   "(default: the kernel's first recorded problem)")
    p.add_argument("--precision", default="fp16", choices=["fp16", "bf16", "fp32"],
                   help="element type (default fp16)")


def program_argument(parser: argparse.ArgumentParser) -> None:
    """The user's program, given after `--` (retune, collect)."""
    # Not dest "command": that names the subcommand, which the error and interrupt messages print.
    parser.add_argument("program", metavar="command", nargs=argparse.REMAINDER,
                        help="-- then the program to run, e.g. -- python train.py")


def program_command(args: argparse.Namespace) -> list[str]:
    """The program given after `--`, without the `--`."""
    command = list(args.program)
    return command[1:] if command and command[0] == "--" else command
