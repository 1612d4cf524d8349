"""Kernels from a notebook or a script's __main__, sent to a measuring process as their source.

A measuring process imports a kernel by its module and name; one defined in a Jupyter cell or in
the script being run has no module it could import. Such a kernel travels as the source of each
@triton.jit function it calls (itself included) and the globals they read: modules (imported by
name there), plain values and constexprs (pickled), and module-level objects of importable modules.
Anything else (a closure, a helper defined in the notebook that is not a @triton.jit function, an
unpicklable value) makes the kernel unshippable, and `ship` says which name is to blame.

In the measuring process each function is compiled from a file of its own in which its `def` sits
on the line it had in the cell (its decorators replaced by one that does nothing, so that the
source Triton hashes and the line it starts at are the original's), in one namespace named
"__main__" as the cell's was, then wrapped by triton.jit with the original's options: its cache key
is the original's: the binaries the compile workers made from the same description (they name
such a kernel by a `Shipped`, compile_pool.function_reference) are the ones it finds in Triton's
cache.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib
import inspect
import os
import pickle
import tempfile
import textwrap
from typing import Any

JIT_OPTIONS = ("do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline")
_KEEP = "_dr_kernel_keep"  # The decorator that stands in for the originals: it returns the function.


class Unshippable(ValueError):
    """A kernel that cannot travel as source; the message names what stops it."""


def is_jit(value: Any) -> bool:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return isinstance(value, (JITFunction, InterpretedFunction))


def _importable(value: Any) -> tuple[str, str] | None:
    """(module, qualified name) by which another process finds `value`, when it can."""
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return (module, qualname) if found is value else None


def _global_names(source: str) -> list[str]:
    """The names a function's body reads that it does not bind itself (arguments, assignments)."""
    tree = ast.parse(source)
    bound, read = set(), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            args = node.args
            bound.update(a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])
            bound.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                read.append(node.id)
            else:
                bound.add(node.id)
    return [n for n in dict.fromkeys(read) if n not in bound]


def ship(jit: Any) -> dict:
    """The description of a @triton.jit function (and every one it calls) that `load` rebuilds in
    another process. Raises Unshippable naming the first thing that cannot travel."""
    functions: list[dict] = []
    values: dict[str, tuple] = {}
    seen: set[int] = set()

    def visit(fn: Any) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        py = fn.fn
        name = py.__name__
        if inspect.getclosurevars(py).nonlocals:
            raise Unshippable(f"{name} reads variables of an enclosing function")
        try:
            lines, start = inspect.getsourcelines(py)
        except (OSError, TypeError) as error:
            raise Unshippable(f"the source of {name} cannot be read ({error})") from None
        source = "".join(lines)
        # The function alone: its decorators (the tuner's own, with its lists and hooks) stay here.
        body = textwrap.dedent(source)
        body = body[body.index("def ") if body.startswith("def ") else body.index("\ndef ") + 1:]
        for g in _global_names(body):
            if g in values or g == name:
                continue
            if g not in py.__globals__:
                if hasattr(builtins, g):
                    continue
                raise Unshippable(f"{name} reads {g!r}, which is not defined")
            value = py.__globals__[g]
            if is_jit(value):
                where = _importable(value)
                if where is None:  # Defined in the notebook too: it travels as source.
                    visit(value)
                    values[g] = ("jit", value.fn.__name__)
                else:
                    values[g] = ("attr", *where)
            elif inspect.ismodule(value):
                values[g] = ("module", value.__name__)
            elif (where := _importable(value)) is not None:
                values[g] = ("attr", *where)
            elif getattr(value, "__module__", None) == "__main__":  # Pickled by a reference nobody else has.
                raise Unshippable(f"{name} reads {g!r}, a {type(value).__name__} defined beside it that is not "
                                  "a @triton.jit function")
            else:
                try:
                    values[g] = ("value", pickle.dumps(value))
                except Exception:  # noqa: BLE001 -- any failure to pickle means it cannot travel.
                    raise Unshippable(f"{name} reads {g!r} ({type(value).__name__}), which cannot be sent to "
                                      "another process") from None
        functions.append({"name": name, "source": source, "start": start,
                          "options": {k: getattr(fn, k) for k in JIT_OPTIONS if hasattr(fn, k)}
                          | dict(getattr(fn, "kwargs", None) or {})})

    visit(jit)
    return {"kernel": jit.fn.__name__, "functions": functions, "globals": values}


def load(shipped: dict, folder: str | None = None) -> Any:
    """The @triton.jit function `ship` described, rebuilt in this process. Each function's file is
    named by its content under `folder` (by default one folder in the system's temporary
    directory, shared by every process: a kernel rebuilt again reuses its files)."""
    import triton

    folder = folder or os.path.join(tempfile.gettempdir(), f"dr_kernel_shipped_{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    space: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins, _KEEP: lambda f: f}
    for name, spec in shipped["globals"].items():
        kind = spec[0]
        if kind == "module":
            space[name] = importlib.import_module(spec[1])
        elif kind == "attr":
            found: Any = importlib.import_module(spec[1])
            for part in spec[2].split("."):
                found = getattr(found, part)
            space[name] = found
        elif kind == "value":
            space[name] = pickle.loads(spec[1])
    for f in shipped["functions"]:  # Callees first: a function's globals hold them when it runs.
        lines = f["source"].splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("def "))
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
        # The decorators' lines become one stand-in and blank lines: the def keeps its line.
        head = [f"{indent}@{_KEEP}\n"] + ["\n"] * (at - 1) if at else []
        text = "\n" * (f["start"] - 1) + "".join(head + lines[at:])
        if indent:
            text = textwrap.dedent(text)
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        path = os.path.join(folder, f"{f['name']}_{digest}.py")
        if not os.path.exists(path):
            partial = f"{path}.{os.getpid()}.tmp"
            with open(partial, "w") as out:
                out.write(text)
            os.replace(partial, path)  # Whole or absent, for processes rebuilding it at once.
        exec(compile(text, path, "exec"), space)  # noqa: S102 -- the user's own kernel, sent by its own process.
        space[f["name"]] = triton.jit(space[f["name"]], **f["options"])
    for name, spec in shipped["globals"].items():  # A callee read under another name than its own.
        if spec[0] == "jit":
            space[name] = space[spec[1]]
    return space[shipped["kernel"]]


class Shipped:
    """A @triton.jit function of __main__ as a compile request names it (compile_pool.py): its
    `ship` description, and the digest by which a worker keeps the one it rebuilt."""

    def __init__(self, description: dict) -> None:
        self.description = description
        self.name = description["kernel"]
        self.digest = hashlib.sha256(pickle.dumps(description)).hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shipped) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)


_REFERENCES: dict[int, tuple[Any, Shipped]] = {}  # id -> (the function, its Shipped).


def reference(jit: Any) -> Shipped:
    """`jit` as a compile request names it: its Shipped description, made once per function (a
    tuning asks per compile request; a notebook that changes a global the kernel reads redefines
    the kernel, or Triton refuses its next launch)."""
    known = _REFERENCES.get(id(jit))
    if known is None or known[0] is not jit:
        known = _REFERENCES[id(jit)] = (jit, Shipped(ship(jit)))
    return known[1]


_LOADED: dict[str, Any] = {}  # Digest -> the function rebuilt in this process (a compile worker's).


def resolve(shipped: Shipped) -> Any:
    """The function `shipped` describes, rebuilt once per process."""
    if shipped.digest not in _LOADED:
        _LOADED[shipped.digest] = load(shipped.description)
    return _LOADED[shipped.digest]


def shippable_reason(jit: Any) -> str | None:
    """None when `jit` can travel as source, else why not."""
    try:
        ship(jit)
    except Unshippable as error:
        return str(error)
    return None

