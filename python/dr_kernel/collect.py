"""Collect mode: run a program without tuning and write down what it launches, for tune-many.

    dr-kernel collect -o work.jsonl -- python train.py ...

runs the program with DR_KERNEL_COLLECT naming the work list (and triton.autotune switched to
dr_kernel's, so that library kernels are seen too). Every tuned kernel then launches the winner
the store holds for its key or, when there is none, its first config (the list's first, or the
space's first), and measures nothing. Each distinct launch (kernel, key, the shapes, dtypes and
strides of its tensors, its other arguments) is appended to the work list at its first sight as
one JSON line, an entry; `dr-kernel tune-many work.jsonl` tunes them (tune_many.py).

An entry holds what a worker needs to launch the kernel again without the program: where to
import it (module, attribute, import root), each argument (a tensor's shape, strides, dtype,
device, its element offset within 16 bytes and, for integer tensors, the least and greatest
value, so that random indices stay in range; other arguments by value), the launch grid of every
config the kernel may search (only the parameters the grid reads), the store key its winner goes
under, and a label. Entries already in the file are not written again, from this process or
another, so a second collect run of the same program adds nothing. At most MAX_PER_KEY entries
are written per store key: a seed or an offset that changes every step would otherwise add an
entry per step, and a key has one winner.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import sys
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV = "DR_KERNEL_COLLECT"
MAX_PER_KEY = 4
MAX_GRID_POINTS = 20_000  # Launch grids recorded per entry at most (configs of the parameters it reads).
INTERPRETER = "cpu (Triton interpreter)"

_lock = threading.Lock()
_seen: set = set()  # (kernel, call signature) seen by this process.
_written: set[str] = set()  # Entry ids in the work list.
_per_key: collections.Counter = collections.Counter()
_read_upto: dict[str, int] = {}  # Work list → bytes of it read into _written.


# Whether this process runs in collect mode: DR_KERNEL_COLLECT names a work list when the process
# starts, or `collected()` is in effect. Read once, not per launch (TunedKernel.run tests it).
ACTIVE = bool(os.environ.get(ENV))


def collecting() -> bool:
    """Whether this process runs in collect mode (DR_KERNEL_COLLECT names a work list)."""
    return ACTIVE


@contextlib.contextmanager
def collected(path: str | os.PathLike):
    """Collect mode for the duration of a `with` block, into the work list `path`."""
    global ACTIVE
    before, was = os.environ.get(ENV), ACTIVE
    os.environ[ENV] = str(Path(path).resolve())
    ACTIVE = True
    try:
        yield
    finally:
        ACTIVE = was
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


# ----- recording ------------------------------------------------------------------------------------

def record(kernel: Any, args: tuple, kwargs: Mapping[str, Any], key: tuple) -> None:
    """Called by TunedKernel.run on every launch in collect mode: writes the launch's entry to the
    work list if it is a new one. Keys with nothing to tune (one config, max_evals=0) are skipped.
    A launch that cannot be recorded is said once per kernel; the program goes on."""
    try:
        _record(kernel, args, kwargs, key)
    except Exception as error:  # noqa: BLE001 -- collecting must never stop the program.
        if kernel.__name__ not in _warned:
            _warned.add(kernel.__name__)
            warnings.warn(f"dr_kernel collect: a launch of {kernel.__name__} could not be recorded "
                          f"({type(error).__name__}: {error}); it is left out of the work list", stacklevel=3)


_warned: set[str] = set()


def _record(kernel: Any, args: tuple, kwargs: Mapping[str, Any], key: tuple) -> None:
    counted = kernel._store_keys.get(key)
    if counted is None:
        return
    nargs = dict(zip(kernel.arg_names, args, strict=False))
    named = {**nargs, **{k: v for k, v in kwargs.items() if k in kernel.arg_names}}
    extra = {k: v for k, v in kwargs.items() if k not in kernel.arg_names and k not in ("grid", "warmup")}
    seen = (id(kernel), tuple((k, _signature(v)) for k, v in named.items()),
            tuple((k, _signature(v)) for k, v in extra.items()))
    with _lock:
        if seen in _seen:
            return
        _seen.add(seen)
    store_key = counted[1]
    described = {k: describe_value(v) for k, v in named.items()}
    entry = {"kernel": locate(kernel), "label": f"{kernel.__name__} {key}", "key": [_plain(v) for v in key],
             "store_key": store_key, "device": _device_of(named), "positional": len(args), "args": described,
             "kwargs": {k: _plain(v) for k, v in extra.items()},
             "grid": grid_table(kernel, nargs, kwargs, kwargs.get("grid"))}
    identity = json.dumps([entry["kernel"], store_key, {k: {**v, "tensor": {**v["tensor"], "range": None}}
                                                          if "tensor" in v else v for k, v in described.items()},
                           entry["kwargs"]], sort_keys=True, default=str)
    entry = {"id": hashlib.sha256(identity.encode()).hexdigest()[:16], **entry}
    _append(Path(os.environ[ENV]), entry)


def _append(path: Path, entry: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock, open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # Several processes of one program may collect into one list.
        try:
            handle.seek(_read_upto.get(str(path), 0))
            for line in handle.read().splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    old = json.loads(line)
                    if old["id"] not in _written:
                        _written.add(old["id"])
                        _per_key[old["store_key"]] += 1
            if entry["id"] in _written or _per_key[entry["store_key"]] >= MAX_PER_KEY:
                return
            handle.seek(0, os.SEEK_END)
            handle.write(json.dumps(entry) + "\n")
            handle.flush()
            _read_upto[str(path)] = handle.tell()
            _written.add(entry["id"])
            _per_key[entry["store_key"]] += 1
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "data_ptr") and hasattr(value, "stride") and hasattr(value, "dtype")


def _signature(value: Any) -> Any:
    if _is_tensor(value):
        return ("t", tuple(value.shape), tuple(value.stride()), str(value.dtype), value.device.type,
                _misalignment(value))
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return tuple(_signature(v) for v in value)
    return ("object", type(value).__name__, repr(value)[:200])


def _misalignment(tensor: Any) -> int:
    # Triton specialises pointers on 16-byte alignment: the rebuilt tensor keeps the same offset.
    return (tensor.storage_offset() * tensor.element_size()) % 16 // max(1, tensor.element_size())


def describe_value(value: Any) -> dict:
    """An argument as the work list holds it: a tensor's layout, a plain value, or an object that
    only an inputs hook can rebuild."""
    if _is_tensor(value):
        description = {"shape": list(value.shape), "stride": list(value.stride()),
                       "dtype": str(value.dtype).removeprefix("torch."), "device": value.device.type,
                       "offset": _misalignment(value), "range": None}
        if not value.dtype.is_floating_point and not value.dtype.is_complex and value.numel() > 0:
            description["range"] = [_plain(value.min().item()), _plain(value.max().item())]
        return {"tensor": description}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if isinstance(value, (tuple, list)) and all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
        return {"value": list(value), "tuple": isinstance(value, tuple)}
    try:
        import triton.language as tl

        if isinstance(value, tl.dtype):
            return {"tl_dtype": str(value)}
    except ImportError:  # pragma: no cover -- collect mode runs inside Triton programs.
        pass
    return {"object": f"{type(value).__module__}.{type(value).__qualname__}"}


def _plain(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return str(value)


def _device_of(named: Mapping[str, Any]) -> str:
    from .tuner import _device_name

    return _device_name(dict(named))


def locate(kernel: Any) -> dict:
    """Where a worker imports the kernel from: the module and attribute holding it (the kernel or
    a wrapper whose `.fn` chain reaches it; first looked for in its function's module, then in
    every module, for a kernel wrapped away from its @triton.jit function), the folder to import
    from, and whether the drop-in switch must be on for the module's triton.autotune to be
    dr_kernel's."""
    home = getattr(kernel.base_fn, "__module__", "__main__")
    name, attribute = home, None
    for name in [home, *(m for m in list(sys.modules) if m != home)]:
        attribute = _attribute_holding(sys.modules.get(name), kernel)
        if attribute is not None:
            break
    else:
        name = home
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    root = None
    if file:
        parts = name.split(".")
        up = len(parts) if Path(file).name == "__init__.py" else len(parts) - 1
        root = str(Path(file).resolve().parents[up])
    # A triton.autotune kernel that the drop-in switch gave to dr_kernel is dr_kernel's in a worker
    # only if the switch is on there too, as it was here ("widen" when it searched past its list).
    switched = getattr(kernel, "fallback", None) is not None
    return {"module": name, "name": attribute, "root": root, "function": kernel.__name__,
            "switch": ("widen" if kernel.widen else "1") if switched else None}


def _attribute_holding(module: Any, kernel: Any) -> str | None:
    # Only Triton's kernel objects are followed down their `.fn` (Autotuner, Heuristics, dr_kernel's):
    # reading `.fn` of any module attribute has effects (pytest.mark.fn makes a mark, with a warning).
    from triton.runtime.jit import KernelInterface

    for attr, value in list(vars(module).items()) if module is not None else ():
        for _ in range(8):
            if value is kernel:
                return attr
            if not issubclass(type(value), KernelInterface):  # type(): isinstance reads a proxy's __class__.
                break
            value = getattr(value, "fn", None)
    return None


# ----- launch grids ---------------------------------------------------------------------------------

class _Reads(dict):
    """A dict that notes which keys a grid function reads."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


def _grid_tuple(grid: Any) -> list:
    return [int(g) for g in grid] if isinstance(grid, (tuple, list)) else [int(grid)]


def grid_table(kernel: Any, nargs: dict, kwargs: Mapping[str, Any], grid: Any) -> dict:
    """The launch grid of the call for each config the kernel may search: {"fixed": grid} when it
    is not a function, else the parameters it reads and the grid for each of their combinations."""
    if not callable(grid):
        return {"fixed": _grid_tuple(grid) if grid is not None else None}
    from .space import make_space

    candidates = kernel._candidates(nargs, dict(kwargs))
    space = kernel.space if kernel.listed is None else make_space(configs=candidates)
    if kernel.widen and kernel.listed is not None:
        from .tuner import widened_space

        space = widened_space(candidates)
    first = dict(candidates[0]) if candidates else kernel._first_config()
    names = list(space.names)
    given = set(nargs) | set(kwargs)

    def call(config: dict, read: set) -> list:
        meta = _Reads(kernel.resolved(nargs, dict(kwargs), config))
        try:
            return _grid_tuple(grid(meta))
        finally:
            read |= meta.read

    read: set[str] = set()
    call(first, read)
    while True:
        # A grid that reads what a heuristic derives from the config depends on every parameter.
        params = names if read - set(names) - given else [n for n in names if n in read]
        points = list(itertools.islice(itertools.product(*(space.values(p) for p in params)), MAX_GRID_POINTS + 1))
        if len(points) > MAX_GRID_POINTS:
            raise ValueError(f"{kernel.__name__}: its grid reads {', '.join(params)}, whose configs are too many "
                             f"to record (over {MAX_GRID_POINTS}); give the grid as a function of fewer parameters")
        table, before = [], set(read)
        for values in points:
            with contextlib.suppress(Exception):  # A heuristic may refuse a combination no config has.
                table.append([list(values), call({**first, **dict(zip(params, values, strict=True))}, read)])
        if read == before:
            return {"params": params, "table": table}


class RecordedGrid:
    """A launch grid from the work list: a function of the config, as the program's was."""

    def __init__(self, description: Mapping[str, Any]):
        self.fixed = description.get("fixed")
        self.params = list(description.get("params") or [])
        self.table = {json.dumps(values): tuple(g) for values, g in description.get("table") or []}

    def __call__(self, meta: Mapping[str, Any]) -> tuple:
        if self.fixed is not None:
            return tuple(self.fixed)
        values = [meta[p] for p in self.params]
        try:
            return self.table[json.dumps(values)]
        except KeyError:
            raise ValueError(f"no recorded launch grid for {dict(zip(self.params, values, strict=True))}") from None


# ----- reading work lists and rebuilding launches ----------------------------------------------------

def read_work(path: str | os.PathLike) -> list[dict]:
    """The entries of a work list; a last line cut off by an interruption is left out, any other
    line that is not an entry is an error naming it."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is not a file; give the work list `dr-kernel collect -o` wrote")
    lines = path.read_text().splitlines()
    entries = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            entry["id"], entry["store_key"], entry["args"]  # noqa: B018 -- what every entry has.
        except (ValueError, KeyError, TypeError) as error:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: not a work-list entry ({error}); fix or delete this line") from None
        entries.append(entry)
    return entries


def load_kernel(where: Mapping[str, Any]) -> Any:
    """The TunedKernel an entry names, imported as the program imported it."""
    import importlib

    from .tuner import TunedKernel

    module, attribute = where["module"], where.get("name")
    if module == "__main__":
        raise ValueError(f"{where.get('function')} is defined in the program's main script, which a worker cannot "
                         "import without running the program: move the kernel into a module")
    if attribute is None:
        raise ValueError(f"{where.get('function')} is not a top-level name of {module}, so a worker cannot find it")
    if where.get("root") and where["root"] not in sys.path:
        sys.path.insert(0, where["root"])
    value = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)
    for _ in range(8):
        if isinstance(value, TunedKernel):
            return value
        value = getattr(value, "fn", None)
    raise ValueError(f"{module}.{attribute} is no longer a kernel tuned by dr_kernel")


def rebuild_arguments(entry: Mapping[str, Any], device: str, seed: int = 0, inputs: Any = None
                      ) -> tuple[list, dict]:
    """(positional arguments, keyword arguments) that launch the entry's kernel again: random data
    of the recorded shapes, strides and dtypes on `device` (integers within their recorded range),
    the recorded values, the recorded grid. `inputs(name, arguments, device)`, a user's hook, may
    return arguments to use instead (index tensors that must be valid, objects)."""
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    values = {name: _rebuild(d, device, generator) for name, d in entry["args"].items()}
    if inputs is not None:
        values.update(inputs(entry["kernel"].get("function"), dict(values), device) or {})
    missing = [f"{n} ({v.what})" for n, v in values.items() if isinstance(v, _Missing)]
    if missing:
        raise ValueError(f"{entry['label']}: {', '.join(missing)} cannot be rebuilt from the work list; give "
                         "--inputs MODULE:FUNCTION returning them")
    names = list(entry["args"])
    args = [values[n] for n in names[:entry["positional"]]]
    kwargs = {n: values[n] for n in names[entry["positional"]:]}
    kwargs.update(entry.get("kwargs") or {})
    kwargs["grid"] = RecordedGrid(entry["grid"])
    kwargs["warmup"] = False
    return args, kwargs


class _Missing:
    def __init__(self, what: str):
        self.what = what


def _rebuild(description: Mapping[str, Any], device: str, generator: Any) -> Any:
    import torch

    if "tensor" in description:
        t = description["tensor"]
        dtype = getattr(torch, t["dtype"])
        shape, stride, offset = t["shape"], t["stride"], t["offset"]
        size = offset + (1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) if all(shape) else 0)
        if dtype.is_floating_point:
            base = torch.randn(size, generator=generator, device=device).to(dtype)
        elif dtype == torch.bool:
            base = torch.randint(0, 2, (size,), generator=generator, device=device).bool()
        else:
            low, high = t.get("range") or (0, 0)
            base = torch.randint(low, high + 1, (size,), generator=generator, device=device,
                                 dtype=torch.int64).to(dtype)
        return base.as_strided(shape, stride, offset)
    if "value" in description:
        value = description["value"]
        return tuple(value) if description.get("tuple") else value
    if "tl_dtype" in description:
        import triton.language as tl

        return getattr(tl, description["tl_dtype"])
    return _Missing(f"a {description.get('object', 'value')}")
