"""Checking a user's kernel across configs without touching the caller's tensors.

A tuner launches every config it measures on the arguments of one real call. Those arguments
belong to the caller: an output may be a ``torch.zeros`` that the kernel fills only in part, an
accumulator that ``atomic_add`` sums into, or an input updated in place. So every launch the
tuner makes runs on a scratch copy of the arguments, reset to the caller's values before each
checking launch; the caller's tensors are only ever written by the one real launch of the winner.

A config is checked against a reference result (the user's reference function, or the first
config of the library's list) on what the reference defines: the elements its launch changed from
the caller's values. A config must write those alike; what it writes beyond them is left out, so
kernels that write only part of an output (blocks of a triangle, whose diagonal blocks cover more
with larger tiles) are compared fairly, and garbage in a ``torch.empty`` output never counts. The
difference must stay within the rounding of the output's dtype: configs sum in different orders.

Some libraries size an output by the config's tiles and read the chosen config back to interpret
it (mamba-ssm sums ``buffer[..., :cdiv(dim, kernel.best_config.kwargs["BLOCK_SIZE"])]``): one
partial sum per block, as many as the config has blocks. Two configs then write different elements
with different meanings, and neither is wrong. For a kernel whose chosen config its library reads
(``NAME.best_config`` in the source of its package, `reads_chosen_config`), an output that a config
writes a different set of elements of than the reference does is not compared; the rest is.

Where a library has replaced PyTorch's CUDA operators with its own (FlagGems does, ~400 of them),
copies and comparisons run dr_kernel's own kernels (device_ops.py) instead.

Exceptions are classified as ``triton.autotune`` does: the compiler's errors and resource limits
mean "this config fails"; anything else is a launch error, which is the kernel's or the caller's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Largest relative L2 difference between two configs' outputs that is rounding, by output dtype.
# Configs reduce in different orders (block sizes, split reductions, atomics); float32 allows for
# TF32 dot products, whose inputs are rounded to 10 bits of mantissa.
_TOLERANCE = {"float64": 1e-9, "float32": 1e-3, "float16": 5e-3, "bfloat16": 3e-2,
              "float8_e4m3fn": 1.5e-1, "float8_e5m2": 2.5e-1, "float8_e4m3fnuz": 1.5e-1, "float8_e5m2fnuz": 2.5e-1}


# Top-level package -> (how many of its modules were loaded when scanned, the names their source
# reads `.best_config` of).
_CONFIG_READERS: dict[str, tuple[int, frozenset]] = {}


def reads_chosen_config(module: str, name: str) -> bool:
    """Whether the source of the loaded modules of `module`'s top-level package reads
    `NAME.best_config` (outside comments): the library interprets the kernel's outputs by the
    config it ran. Scanned once per package (again when more of its modules have loaded since)."""
    import re
    import sys

    top = (module or "__main__").split(".")[0]
    modules = [m for key, m in list(sys.modules.items()) if key == top or key.startswith(top + ".")]
    cached = _CONFIG_READERS.get(top)
    if cached is None or cached[0] != len(modules):
        pattern = re.compile(r"\b(\w+)\.best_config\b")
        names = set()
        for m in modules:
            path = getattr(m, "__file__", None)
            if not path or not path.endswith(".py"):
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            if ".best_config" not in text:
                continue
            for line in text.splitlines():
                names.update(pattern.findall(line.split("#", 1)[0]))  # Comments aside.
        cached = _CONFIG_READERS[top] = (len(modules), frozenset(names))
    return name in cached[1]


def same_elements_written(out, ref, pristine) -> bool:
    """Whether `out` and `ref` changed the same elements of `pristine`."""
    import torch

    return bool(torch.equal(changed(out, pristine), changed(ref, pristine)))


def is_tensor(value: Any) -> bool:
    return hasattr(value, "data_ptr") and hasattr(value, "dtype") and hasattr(value, "untyped_storage")


def tensor_of(value: Any) -> Any:
    """The tensor an argument stands for: the argument itself, or the base tensor of a TMA tensor
    descriptor (triton.tools.tensor_descriptor.TensorDescriptor, a dataclass with a `base`), or None."""
    if is_tensor(value):
        return value
    base = getattr(value, "base", None)
    return base if dataclasses.is_dataclass(value) and is_tensor(base) else None


def tolerance(dtype: Any) -> float:
    """The relative L2 difference that is rounding for outputs of `dtype` (0 for integers)."""
    return _TOLERANCE.get(str(dtype).replace("torch.", ""), 0.0)


# Each scratch copy's memory is followed by guard bytes set to GUARD_BYTE (guard_size of them):
# a launch that changes them wrote past the end of the tensor, which a config outside a library's
# list can do where the library sizes a buffer for its listed blocks (mamba-ssm's chunk scan
# backward keeps partial sums per 32 rows, its list's smallest block; widening's 16 writes twice
# as many), and which, unguarded, lands in whatever memory follows.
GUARD_BYTE = 0xA5


def guard_size(nbytes: int) -> int:
    """Guard bytes after a copy of `nbytes`: as many (an overrun by as many blocks again), at least
    4 KiB, at most 16 MiB."""
    return min(max(nbytes, 4096), 16 << 20)


@dataclasses.dataclass
class Guard:
    """The guard bytes after one copied storage, and the arguments over that storage."""

    names: list[str]
    tail: Any  # uint8 tensor over the guard bytes


def overruns(guards: Sequence[Guard]) -> list[tuple[list[str], int]]:
    """(argument names, guard bytes changed) for each guard a launch changed, counted with one wait
    for the device; those guards are set again."""
    if not guards:
        return []
    import torch

    counts = torch.stack([(g.tail != GUARD_BYTE).sum().to(guards[0].tail.device) for g in guards]).tolist()
    out = []
    for guard, count in zip(guards, counts, strict=True):
        if count:
            guard.tail.fill_(GUARD_BYTE)
            out.append((guard.names, int(count)))
    return out


def scratch_copies(arguments: Mapping[str, Any], guards: list[Guard] | None = None) -> dict[str, Any]:
    """Returns the arguments with every tensor replaced by a copy on the same device.

    Tensors that share memory in the caller (views of one buffer, the same tensor passed twice
    for an in-place kernel) share memory in the copy too: each underlying storage is copied once
    and every tensor becomes the same view of the copy. With `guards`, each copy is followed by
    guard bytes (guard_size), each appended to `guards`; not where a library has replaced
    PyTorch's operators (uses_own_ops), whose copies stay as large as the caller's.
    """
    import torch

    storages: dict[tuple, Any] = {}
    guarded: dict[tuple, Guard] = {}

    def copy(name, tensor):
        storage = tensor.untyped_storage()
        key = (str(tensor.device), storage.data_ptr())
        if key not in storages:
            if uses_own_ops(tensor):
                clone = torch.empty(storage.nbytes(), dtype=torch.uint8, device=tensor.device)
                _ops().copy_bytes(clone, _bytes(tensor))
                storages[key] = clone.untyped_storage()
            elif guards is not None:
                size = storage.nbytes()
                clone = torch.empty(size + guard_size(size), dtype=torch.uint8, device=tensor.device)
                clone[:size].copy_(_bytes(tensor))
                clone[size:].fill_(GUARD_BYTE)
                storages[key] = clone.untyped_storage()
                guarded[key] = Guard([], clone[size:])
                guards.append(guarded[key])
            else:
                storages[key] = storage.clone()
        if key in guarded:
            guarded[key].names.append(name)
        view = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
        return view.set_(storages[key], tensor.storage_offset(), tensor.size(), tensor.stride())

    out = {}
    for name, value in arguments.items():
        tensor = tensor_of(value)
        if tensor is None:
            out[name] = value
        elif tensor is value:
            out[name] = copy(name, value)
        else:  # A descriptor: the same descriptor over the copy (a hook may change its block shape).
            out[name] = dataclasses.replace(value, base=copy(name, tensor))
    return out


def restore(scratch: Mapping[str, Any], pristine: Mapping[str, Any], names: Iterable[str] | None = None) -> None:
    """Copies the pristine values back into the scratch tensors (all, or those in `names`)."""
    for name in scratch if names is None else names:
        tensor = tensor_of(scratch[name])
        if tensor is None:
            continue
        source = _bytes(tensor_of(pristine[name]))
        target = _bytes(tensor)[:source.numel()]  # Not its guard bytes (scratch_copies).
        if uses_own_ops(tensor):
            _ops().copy_bytes(target, source)
        else:
            target.copy_(source)


def snapshot(tensor):
    """A copy of `tensor`'s values (what a launch left in an output), made without PyTorch's
    operators on the GPU."""
    if not (uses_own_ops(tensor) and _ops().supported(tensor)):
        return tensor.clone()
    import torch

    copy = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    _ops().copy_bytes(_elements(copy), _elements(tensor))
    return copy


def poison(tensor) -> bool:
    """Inverts every bit of a contiguous tensor's elements in place, so that each differs from
    what it held (a launch that writes an element changes it, whatever it writes). False, doing
    nothing, for a tensor that is not contiguous."""
    if not tensor.is_contiguous():
        return False
    if uses_own_ops(tensor):
        _ops().flip_bytes(_elements(tensor))
    else:
        _elements(tensor).bitwise_not_()
    return True


def uses_own_ops(tensor) -> bool:
    """Whether checking copies and compares `tensor` with device_ops.py's kernels: a CUDA tensor
    while a library has replaced some of PyTorch's operators (torch.library registrations over
    aten, as FlagGems' use_gems() makes). PyTorch's own CUDA operators need no compile, so they
    serve whenever they are PyTorch's."""
    if tensor.device.type != "cuda":
        return False
    import torch

    replaced = getattr(torch.library, "_impls", None)  # "aten/eq.Tensor/CUDA", ... registered from Python.
    if replaced is None:
        return True
    return any(f"aten/{op}/{key}" in replaced for op in _TORCH_PATH_OPS for key in ("CUDA", "AutogradCUDA"))


# The operators the PyTorch path below uses on a GPU's tensors.
_TORCH_PATH_OPS = ("copy_", "clone", "ne.Tensor", "eq.Tensor", "any", "all", "index.Tensor", "equal", "_to_copy",
                   "isnan", "isfinite", "bitwise_and.Tensor", "bitwise_not", "logical_not", "logical_and", "sub.Tensor",
                   "linalg_vector_norm", "norm.Scalar", "norm.ScalarOpt_dim", "fill_.Scalar", "zero_")


def _ops():
    # Imported on first use: it imports Triton, which checking CPU tensors does not need.
    from . import device_ops

    return device_ops


def _elements(tensor):
    # The bytes of a contiguous tensor's own elements, as one uint8 tensor.
    import torch

    size = tensor.element_size()
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(
        tensor.untyped_storage(), tensor.storage_offset() * size, (tensor.numel() * size,), (1,))


def _bytes(tensor):
    # The whole storage behind a view, so that elements outside the view (a kernel may write its
    # padding) are restored too and overlapping views are restored once each, consistently.
    import torch

    storage = tensor.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage, 0, (storage.nbytes(),), (1,))


def changed(after, before):
    """Elements of `after` whose bits differ from `before` (same shape and dtype)."""
    import torch

    size = after.element_size()
    if after.dtype == torch.bool:
        return after != before
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(size)
    if as_int is None or after.is_complex():
        return ~(after == before)
    return after.contiguous().view(as_int) != before.contiguous().view(as_int)


def written(scratch: Mapping[str, Any], pristine: Mapping[str, Any]) -> list[str]:
    """Names of the tensor (or descriptor) arguments a launch changed."""
    return [n for n, v in scratch.items()
            if tensor_of(v) is not None and _any_changed(tensor_of(v), tensor_of(pristine[n]))]


def _any_changed(after, before) -> bool:
    if uses_own_ops(after) and _ops().supported(after) and _ops().supported(before):
        return _ops().any_changed(after, before)
    return bool(changed(after, before).any())


def difference(out, ref, pristine) -> float:
    """Relative L2 difference of `out` from `ref` over the elements the reference changed from
    `pristine`: what it defines must be defined alike (an element the config left unwritten keeps
    its pristine value and differs), while elements only the config wrote are its own business (a
    config with larger tiles may write more of a partly written output). inf where they disagree
    on NaN or infinity, or for integers that differ at all."""
    import torch

    if uses_own_ops(ref) and all(_ops().supported(t) for t in (out, ref, pristine)) \
            and out.dtype == ref.dtype == pristine.dtype and out.shape == ref.shape == pristine.shape:
        return _ops().relative_difference(out, ref, pristine)
    defined = changed(ref, pristine)
    wide = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float32,
            torch.float64: torch.float64}.get(ref.dtype)
    if wide is not None and out.dtype == ref.dtype and out.shape == ref.shape:
        # The common case with one wait for the GPU: the reference defines every element and
        # nothing is NaN or infinite (then both norms are finite). Anything else is judged element
        # by element below. A tuning checks every config it times, and the waits, float copies
        # and selections of the path below cost 0.3-1.1 s of a library op's first call (H100).
        count, diff, scale = torch.stack([defined.sum().to(torch.float64),
                                          torch.linalg.vector_norm(out.to(wide) - ref).to(torch.float64),
                                          torch.linalg.vector_norm(ref, dtype=wide).to(torch.float64)]).tolist()
        if count == defined.numel() and math.isfinite(diff) and math.isfinite(scale):
            return diff / scale if scale > 0 else diff
        count = int(count)
    else:
        count = int(defined.sum())
    if count == 0:
        return 0.0
    # Most references write every element: then no selection (a copy, and a wait) is needed.
    a, b = (out, ref) if count == defined.numel() else (out[defined], ref[defined])
    if not (a.dtype.is_floating_point or a.is_complex()):
        return 0.0 if bool(torch.equal(a, b)) else math.inf
    # float32 sums the squares of half-precision values with errors far below any tolerance, at
    # half double's memory traffic; wider types keep their own precision.
    wide = torch.complex128 if a.is_complex() else torch.float64 if a.dtype == torch.float64 else torch.float32
    a, b = a.to(wide), b.to(wide)
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not bool(torch.equal(nan_a, nan_b)):
        return math.inf
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not bool(torch.equal(a[~finite & ~nan_a], b[~finite & ~nan_b])):
        return math.inf  # Infinities of different sign, or at different places.
    a, b = a[finite], b[finite]
    scale = b.norm().item()
    diff = (a - b).norm().item()
    return diff / scale if scale > 0 else diff


def config_failure_kinds() -> tuple[type, ...]:
    """The exception types that mean "this config fails", as triton.autotune treats them."""
    from triton.compiler.errors import CompilationError, CompileTimeAssertionFailure
    from triton.runtime.errors import OutOfResources, PTXASError

    return (OutOfResources, CompileTimeAssertionFailure, PTXASError, CompilationError)


def classify(error: BaseException) -> dict:
    """The measurement of a launch that raised: out_of_resources or compile_error for the
    failures triton.autotune skips a config for (and the driver's "too many resources requested"
    refusal, which triton.autotune would raise), launch_error for anything else (the kernel's or
    its caller's fault, which triton.autotune raises too)."""
    try:
        kinds = config_failure_kinds()
        from triton.runtime.errors import OutOfResources
    except ImportError:  # Triton missing: nothing is known to be a config's failure.
        kinds, OutOfResources = (), ()
    text = f"{type(error).__name__}: {error}"
    lowered = text.lower()
    if (OutOfResources and isinstance(error, OutOfResources)) or "out of resource" in lowered \
            or "too many resources requested" in lowered:
        # Also the driver's launch refusal, which reaches Python as a plain RuntimeError: the
        # config asks more of the device than it has, whatever raised it.
        status = "out_of_resources"
    elif kinds and isinstance(error, kinds):
        status = "compile_error"
    else:
        status = "launch_error"
    return {"status": status, "error": text[:4000]}


# ----- deciding by majority when no reference is given -------------------------------------------

SIGNATURE_SAMPLES = 2048


def signature(outputs: Iterable[Any]) -> list:
    """A small sample of each output (up to SIGNATURE_SAMPLES evenly spaced elements, as floats,
    with the dtype): enough to tell configs that compute different results apart, small enough
    to travel back from a measuring process with every measurement."""
    import torch

    out = []
    for tensor in outputs:
        flat = tensor.reshape(-1)
        step = max(1, flat.numel() // SIGNATURE_SAMPLES)
        sample = flat[::step][:SIGNATURE_SAMPLES]
        values = sample.to(torch.float64) if not sample.dtype.is_complex else sample.abs().to(torch.float64)
        out.append([str(tensor.dtype).replace("torch.", ""), values.cpu().tolist()])
    return out


def signatures_agree(a: list, b: list) -> bool:
    """Whether two signatures are of one result: the same NaN and infinite elements, and finite
    elements alike within the rounding of their dtype (relative L2, as configs are compared)."""
    if len(a) != len(b):
        return False
    for (dtype, x), (other, y) in zip(a, b, strict=True):
        if dtype != other or len(x) != len(y):
            return False
        diff = scale = 0.0
        for u, v in zip(x, y, strict=True):
            if u != u or v != v or math.isinf(u) or math.isinf(v):
                if not (u == v or (u != u and v != v)):
                    return False
                continue
            diff += (u - v) ** 2
            scale += v * v
        limit = tolerance(dtype)
        if math.sqrt(diff) > limit * math.sqrt(scale) + (0.0 if limit else 1e-300):
            return False
    return True


def majority(votes: list[tuple[Any, list, bool]]) -> tuple[list[list], int]:
    """Groups the voters (config, signature, agrees with the reference) by result and returns the
    groups, largest first, and the position among them of the reference's group (-1 if none)."""
    groups: list[list] = []
    for config, sig, agrees in votes:
        for group in groups:
            if signatures_agree(group[0][1], sig):
                group.append((config, sig, agrees))
                break
        else:
            groups.append([(config, sig, agrees)])
    groups.sort(key=len, reverse=True)
    return groups, next((i for i, g in enumerate(groups) if any(agrees for _, _, agrees in g)), -1)
