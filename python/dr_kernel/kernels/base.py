"""The description every built-in kernel shares: its search space, its problems and how to run it.

A built-in kernel is one object that knows everything the tuner needs about one Triton kernel
family: the @triton.jit function, the space of configurations worth searching, the problems
(shapes) it was recorded on, how to build inputs, launch it, check it against a framework
reference, count its work, and how to describe its arguments to the compiler when no GPU is
present. This module holds that object and the helpers the families share; the families live in
one module each beside it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# A configuration maps each parameter of a space to one value; a shape maps each key argument of
# a problem (sizes and flags) to its value. Both are plain dicts so that they cross into C++, JSON
# and worker processes unchanged.
Config = dict[str, Any]
Shape = dict[str, Any]

# The compiler options a configuration may carry next to the kernel's own constexpr parameters.
# They are passed to triton.compile() as options instead of as arguments of the kernel.
COMPILE_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")

# Canonical names of the element types the built-in kernels support, with their sizes in bytes.
# The names are Triton's, so that a pointer's compile signature is simply "*" + name.
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}

_DTYPE_ALIASES = {
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
}


def dtype_name(dtype: Any) -> str:
    """Returns the canonical name ("fp16", "bf16" or "fp32") of a torch dtype or a dtype string."""
    name = _DTYPE_ALIASES.get(str(dtype).lower())
    if name is None:
        raise ValueError(
            f"dtype {dtype!r} is not supported by the built-in kernels; use one of fp16, bf16, fp32.")
    return name


def torch_dtype(dtype: Any):
    """Returns the torch dtype for a dtype name; torch is imported here, on first use, because the
    compile workers never need it and it costs a second or two to import."""
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name(dtype)]


@dataclass(frozen=True)
class Pointer:
    """Stands in for a tensor argument when a kernel is compiled without a GPU: the compiler needs
    only the element type and the knowledge that the address is 16-byte aligned, which every
    allocation of PyTorch's caching allocator is."""

    dtype: str
    aligned: bool = True


def _is_constexpr(param: inspect.Parameter) -> bool:
    # Triton recognises constexpr parameters by their annotation, whether it is the tl.constexpr
    # class itself or a string naming it (as under `from __future__ import annotations`).
    annotation = param.annotation
    if annotation is inspect.Parameter.empty:
        return False
    return "constexpr" in (annotation if isinstance(annotation, str) else getattr(annotation, "__name__", ""))


def is_gluon(fn: Any) -> bool:
    """Whether `fn` is a @gluon.jit function (triton.experimental.gluon): compiled from a
    GluonASTSource, and never run by Triton's interpreter."""
    return bool(getattr(fn, "is_gluon", lambda: False)())


def python_function(fn: Any) -> Callable:
    """Returns the plain Python function behind a @triton.jit function, interpreted or compiled."""
    return getattr(fn, "fn", fn)


def specialise(fn: Any, arguments: Mapping[str, Any]) -> tuple[dict, dict, dict]:
    """Describes a launch to the compiler the way Triton's launcher would: returns the signature,
    the constexpr values and the attributes that triton.compile() takes for these argument values.

    The rules mirror what Triton 3.6's JIT does at launch, so that a kernel compiled here is the
    kernel a launch would compile: an integer equal to 1 becomes the constant 1, an integer
    divisible by 16 and an aligned pointer are marked divisible by 16 (which lets the compiler
    vectorise loads), integers are i32 when they fit and i64 otherwise, floats are fp32. Arguments
    named in the kernel's do_not_specialize lists are left general, as the JIT leaves them.

    The attributes are the JIT's to the letter, an empty list for a specialised pointer or integer
    that is not divisible included, because Triton's cache key hashes their text: a compile here
    then lands in the cache entry the launch looks up, and the launch loads it instead of compiling.
    """
    parameters = list(inspect.signature(python_function(fn)).parameters.values())
    not_specialised = set(getattr(fn, "do_not_specialize", ()) or ())
    not_aligned = set(getattr(fn, "do_not_specialize_on_alignment", ()) or ())
    missing = [p.name for p in parameters if p.name not in arguments and p.default is inspect.Parameter.empty]
    if missing:
        raise ValueError(f"arguments for {python_function(fn).__name__} lack {', '.join(missing)}; "
                         "give a value for every parameter of the kernel.")
    signature, constexprs, attrs = {}, {}, {}
    for index, param in enumerate(parameters):
        value = arguments.get(param.name, param.default)
        specialise_value = index not in not_specialised and param.name not in not_specialised
        check_alignment = specialise_value and index not in not_aligned and param.name not in not_aligned
        if _is_constexpr(param) or value is None:  # The JIT makes a None argument a constexpr too.
            signature[param.name] = "constexpr"
            constexprs[param.name] = value
        elif isinstance(value, Pointer):
            signature[param.name] = "*" + value.dtype
            if specialise_value:
                attrs[(index,)] = [["tt.divisibility", 16]] if value.aligned and check_alignment else []
        elif isinstance(value, bool):
            signature[param.name] = "u1"
        elif isinstance(value, int):
            if value == 1 and specialise_value:
                signature[param.name] = "constexpr"
                constexprs[param.name] = 1
                continue
            if -2**31 <= value < 2**31:
                signature[param.name] = "i32"
            elif value >= 2**63:
                signature[param.name] = "u64"
            else:
                signature[param.name] = "i64"
            if specialise_value:
                attrs[(index,)] = [["tt.divisibility", 16]] if value % 16 == 0 and check_alignment else []
        elif isinstance(value, float):
            signature[param.name] = "fp32"
        else:
            raise TypeError(f"argument {param.name}={value!r} cannot be described to the compiler; "
                            "pass a Pointer, an int, a float or a bool.")
    return signature, constexprs, attrs


def cdiv(a: int, b: int) -> int:
    """Returns the ceiling of a / b for positive integers, as tl.cdiv does."""
    return -(-a // b)


def check_starts_aligned(kernel: str, **tensors) -> None:
    """Raises ValueError naming the tensors that do not start on a 16-byte boundary: a tensor
    descriptor (the TMA kernels' copies) needs one, and a launch without it would fault."""
    off = [f"{name} (address % 16 = {t.data_ptr() % 16})" for name, t in tensors.items() if t.data_ptr() % 16]
    if off:
        raise ValueError(f"{kernel} with TMA > 0 copies through tensor descriptors, which need operands that start "
                         f"on a 16-byte boundary; {', '.join(off)} do not: pass tensors that own their storage "
                         "(or .clone() the view), or search TMA = 0")


def ensure_allocator() -> None:
    """Sets Triton's allocator to one from PyTorch's caching allocator where the calling context
    has none. A kernel that makes tensor descriptors on the GPU (tl.make_tensor_descriptor)
    writes them to scratch memory that its launcher asks Triton's allocator for, and Triton has
    none until a program sets one (per thread: it is a context variable); a program's own
    allocator is left alone."""
    import triton
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(_scratch)


def _scratch(size, alignment, stream):
    import torch

    return torch.empty(size, dtype=torch.int8, device="cuda")


@dataclass
class BuiltinKernel:
    """One built-in Triton kernel family with everything needed to tune it.

    `space` maps each tunable parameter to its ordered list of values (kernel constexprs and the
    compiler options num_warps and num_stages alike); `constraints` are Python expressions over
    those names that every configuration must satisfy. `shapes` are the problems the family was
    recorded on, in the recorded tables' key order. The callables take plain shapes, dtypes and
    configurations, so a worker process can use them without anything else from the tuner.
    """

    name: str
    family: str
    fn: Any
    space: dict[str, list]
    shape_keys: tuple[str, ...]
    shapes: list[Shape]
    # Returns the kernel's arguments for compiling without a GPU: Pointer placeholders for tensors,
    # Python numbers for scalars and the configuration's values for constexprs.
    arguments: Callable[[Shape, str, Config], dict[str, Any]]
    _make_inputs: Callable[[Shape, Any, Any, int], dict[str, Any]]
    _launch: Callable[[Any, dict[str, Any], Config], Any]
    _reference: Callable[[dict[str, Any]], Any]
    output_name: str
    _flops: Callable[[Shape], int]
    _bytes: Callable[[Shape, int], int]
    constraints: list[str] = field(default_factory=list)
    reference_name: str = ""
    description: str = ""
    # The framework's own operator on the inputs in their own dtype (what `reference_name` names),
    # timed next to the kernel; `reference` instead computes in fp32 for checking.
    _framework: Callable[[dict[str, Any]], Any] | None = None
    # Whether the kernel's work runs on tensor cores (tl.dot), which sets the peak it is held to.
    tensor_cores: bool = False
    # The element type of the tensor cores' operands when it is not the problem's (the fp8 GEMM
    # multiplies e4m3 whatever type it writes): the peak is that type's.
    operand_dtype: str | None = None
    # Values of parameters a config may leave out (a variant added after tables were recorded).
    defaults: dict[str, Any] = field(default_factory=dict)
    # The @triton.jit function a config launches on a problem, when the family's variants are
    # kernels of their own (split-K beside the plain matmul, and the matmul that knows its rows'
    # alignment on sizes Triton does not specialise); None: always `fn`.
    variant: Callable[[Config, Shape], Any] | None = None
    # The space a tuning of one problem searches, where it is not `space` for every problem:
    # (shape, device limits) to (space, constraints), as in matmul.py's _problem_space.
    _problem_space: Callable[[Shape, Any], tuple[dict[str, list], list[str]]] | None = None
    # The problem a launch's inputs pose (shape keys to sizes), for families whose variant depends
    # on it: a launch then runs the function its compile description compiled.
    _problem: Callable[[dict[str, Any]], Shape] | None = None
    # Values of parameters whose kernels run compiled only (Gluon's: Triton's interpreter does not
    # run them), which a tuning under the interpreter does not search.
    compiled_only: dict[str, list] = field(default_factory=dict)
    # Configs a tuning of one problem on a device of these limits measures before its strategy
    # proposes anything, (shape, limits) to configs: a variant no recorded table holds, which the
    # cost model cannot rank, opened by the configs that won where it was measured (attention.py).
    _opening: Callable[[Shape, Any], list[Config]] | None = None

    # ----- search space -------------------------------------------------------------------------

    def check_config(self, config: Mapping[str, Any]) -> Config:
        """Returns the configuration as a plain dict (the defaults of parameters it leaves out
        filled in), or raises ValueError naming what is wrong."""
        config = {**{k: v for k, v in self.defaults.items() if k not in config}, **config}
        missing = [p for p in self.space if p not in config]
        unknown = [p for p in config if p not in self.space and p not in COMPILE_OPTIONS]
        if missing or unknown:
            problem = (f"lacks {', '.join(missing)}" if missing else f"has unknown {', '.join(unknown)}")
            raise ValueError(f"config {dict(config)} for kernel '{self.name}' {problem}; "
                             f"give exactly the parameters {', '.join(self.space)}.")
        return dict(config)

    def search_space(self):
        """The space as the engine's Space (constraints compiled once, in C++)."""
        from ..space import make_space

        return make_space(self.space, constraints=self.constraints)

    def space_for(self, shape: Mapping[str, Any], limits: Any = None, interpret: bool = False):
        """The Space a tuning of `shape` searches on a device of `limits` (default the H200's), or
        with `interpret` under Triton's interpreter: the kernel's own, or the one its family makes
        for the problem (matmul's leaves out the configs whose accumulator spills and adds the
        splits of K that can pay on the problem)."""
        from ..space import make_space

        if self._problem_space is None:
            return self.search_space()
        space, constraints = self.space_parts(shape, limits, interpret)
        return make_space(space, constraints=constraints)

    def space_parts(self, shape: Mapping[str, Any], limits: Any = None, interpret: bool = False
                    ) -> tuple[dict, list[str]]:
        """space_for's space as its parts: the parameters' values and the constraints (what a
        benchmark records beside a session, so that a replay searches the space that ran)."""
        if self._problem_space is None:
            return {k: list(v) for k, v in self.space.items()}, list(self.constraints)
        if limits is None:
            from ..analysis import H200 as limits
        space, constraints = self._problem_space(self.check_shape(shape), limits)
        if interpret:
            space = {k: [v for v in values if v not in self.compiled_only.get(k, ())] for k, values in space.items()}
        return {k: list(v) for k, v in space.items()}, list(constraints)

    def opening(self, shape: Mapping[str, Any], limits: Any = None, interpret: bool = False) -> list[Config]:
        """The configs a model-guided tuning of `shape` measures first (BuiltinKernel._opening);
        under the interpreter (`interpret`) none of a kernel that runs compiled only."""
        if self._opening is None:
            return []
        if limits is None:
            from ..analysis import H200 as limits
        configs = self._opening(self.check_shape(shape), limits)
        return [dict(c) for c in configs
                if not (interpret and any(c.get(k) in values for k, values in self.compiled_only.items()))]

    def satisfies(self, config: Mapping[str, Any]) -> bool:
        """Returns whether a configuration meets every constraint of the space."""
        return self.search_space().is_valid(dict(config))

    def configs(self) -> Iterator[Config]:
        """Yields every configuration of the space that meets the constraints, in the order of the
        space's value lists (the last parameter varies fastest)."""
        yield from self.search_space().configs()

    # ----- problems ------------------------------------------------------------------------------

    def check_shape(self, shape: Mapping[str, Any]) -> Shape:
        """Returns the shape as a plain dict in key order, or raises ValueError naming the problem."""
        missing = [k for k in self.shape_keys if k not in shape]
        unknown = [k for k in shape if k not in self.shape_keys]
        if missing or unknown:
            problem = (f"lacks {', '.join(missing)}" if missing else f"has unknown {', '.join(unknown)}")
            raise ValueError(f"shape {dict(shape)} for kernel '{self.name}' {problem}; "
                             f"give exactly the keys {', '.join(self.shape_keys)}.")
        return {k: shape[k] for k in self.shape_keys}

    def flops(self, shape: Mapping[str, Any]) -> int:
        """Returns the floating-point operations one launch performs on this problem."""
        return self._flops(self.check_shape(shape))

    def bytes(self, shape: Mapping[str, Any], dtype: Any = "fp16") -> int:
        """Returns the minimum bytes one launch must move between the GPU and its memory."""
        return self._bytes(self.check_shape(shape), ELEMENT_BYTES[dtype_name(dtype)])

    # ----- running -------------------------------------------------------------------------------

    def make_inputs(self, shape: Mapping[str, Any], dtype: Any = "fp16", device: Any = "cuda",
                    seed: int = 0) -> dict[str, Any]:
        """Returns the problem's tensors (random normal inputs and an uninitialised output) and the
        scalars a launch needs, drawn from a generator seeded with `seed`."""
        return self._make_inputs(self.check_shape(shape), torch_dtype(dtype), device, seed)

    def launch(self, inputs: dict[str, Any], config: Mapping[str, Any]) -> Any:
        """Launches the kernel once on `inputs` with `config`, including num_warps and num_stages."""
        config = self.check_config(config)
        return self._launch(self.fn_for(config, self.problem_of(inputs)), inputs, config)

    def problem_of(self, inputs: dict[str, Any]) -> Shape | None:
        """The shape of the problem `inputs` pose, where the family's variant depends on it."""
        return self._problem(inputs) if self._problem is not None else None

    def fn_for(self, config: Mapping[str, Any], shape: Mapping[str, Any] | None) -> Any:
        """The @triton.jit function `config` launches on `shape` (its variant's, for families that
        have them; a family whose variant depends on the problem needs the shape)."""
        if self.variant is None:
            return self.fn
        if shape is None and self._problem is not None:
            raise ValueError(f"kernel '{self.name}' launches a function that depends on the problem; "
                             "give the shape (or the inputs' problem_of) to fn_for.")
        return self.variant(config, shape)

    def reference(self, inputs: dict[str, Any]) -> Any:
        """Returns the framework's result for `inputs`, computed in fp32 and cast to the output's
        dtype, to compare the kernel's output against."""
        return self._reference(inputs)

    def framework(self, inputs: dict[str, Any]) -> Any:
        """Runs the framework's operator on `inputs` in their own dtype and returns its result:
        the time to beat (torch.matmul is cuBLAS, scaled_dot_product_attention is flash attention)."""
        if self._framework is None:
            raise NotImplementedError(f"kernel '{self.name}' has no framework operator to compare with")
        return self._framework(inputs)

    def output(self, inputs: dict[str, Any]) -> Any:
        """Returns the tensor the kernel writes, to poison before a launch and check after it."""
        return inputs[self.output_name]

    # ----- compiling without a GPU ---------------------------------------------------------------

    def compile_source(self, shape: Mapping[str, Any], dtype: Any, config: Mapping[str, Any]
                       ) -> tuple[dict, dict, dict]:
        """Returns (signature, constexprs, attrs) for triton.compiler.ASTSource for this problem
        and configuration, as a launch on contiguous tensors would specialise them."""
        config = self.check_config(config)
        shape = self.check_shape(shape)
        fn = self.fn_for(config, shape)
        # A Gluon kernel pipelines by hand: its arguments may take a compile option's value (its
        # stage count) as a constexpr of its own, so they see the whole config.
        kernel_config = config if is_gluon(fn) else {k: v for k, v in config.items() if k not in COMPILE_OPTIONS}
        return specialise(fn, self.arguments(shape, dtype_name(dtype), kernel_config))

    def signature(self, shape: Mapping[str, Any], dtype: Any = "fp16") -> dict[str, str]:
        """Returns the compile signature (parameter name to Triton type or "constexpr")."""
        shape = self.check_shape(shape)
        placeholders = {p: None for p in self.space if p not in COMPILE_OPTIONS and p not in self.defaults}
        return specialise(self.fn, self.arguments(shape, dtype_name(dtype), placeholders))[0]

    def constexprs(self, shape: Mapping[str, Any], config: Mapping[str, Any], dtype: Any = "fp16"
                   ) -> dict[str, Any]:
        """Returns the values of the compile-time constants: the configuration's kernel parameters,
        the problem's constexpr flags and sizes, and the scalar arguments equal to 1."""
        return self.compile_source(shape, dtype, config)[1]

    def __reduce__(self):
        # A built-in kernel travels to worker processes by name: its @triton.jit function holds
        # caches that do not pickle, and the worker's registry has the same object anyway.
        from . import get

        return (get, (self.name,))


def geometric(lo: int, hi: int) -> list[int]:
    """Returns the powers of two from lo to hi inclusive."""
    return [2**e for e in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]
