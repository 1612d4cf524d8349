"""The built-in Triton kernels the tuner knows how to run, check and compile.

Each family is one module holding its @triton.jit function and one BuiltinKernel describing it;
this package collects them in BUILTINS. matmul, softmax and attention are the kernels of the
recorded tables in data/h200/ (same parameter names, same code for fp16); rmsnorm, layernorm,
layernorm_bwd, cross_entropy, swiglu, cumsum, grouped_matmul and fp8_matmul were added after them,
and add_rmsnorm (a residual add fused with RMSNorm, for dr_kernel.ops.add_rms_norm), linear_act
(a linear layer with bias and activation, for dr_kernel.ops.linear) and masked_softmax (scale,
additive mask and softmax, for dr_kernel.ops.masked_softmax) after those.

Whether the functions run compiled or in Triton's interpreter is decided when this package is
first imported, because triton.jit reads TRITON_INTERPRET at decoration time: set the variable
before importing dr_kernel.kernels to run them on CPU tensors.
"""

from __future__ import annotations

from ..versions import check_triton
from .add_rmsnorm import KERNEL as _add_rmsnorm
from .attention import KERNEL as _attention
from .base import (
    COMPILE_OPTIONS,
    ELEMENT_BYTES,
    BuiltinKernel,
    Config,
    Pointer,
    Shape,
    dtype_name,
    specialise,
    torch_dtype,
)
from .cross_entropy import KERNEL as _cross_entropy
from .cumsum import KERNEL as _cumsum
from .fp8_matmul import KERNEL as _fp8_matmul
from .grouped_matmul import KERNEL as _grouped_matmul
from .layernorm import KERNEL as _layernorm
from .layernorm_bwd import KERNEL as _layernorm_bwd
from .linear_act import KERNEL as _linear_act
from .masked_softmax import KERNEL as _masked_softmax
from .matmul import KERNEL as _matmul
from .rmsnorm import KERNEL as _rmsnorm
from .softmax import KERNEL as _softmax
from .swiglu import KERNEL as _swiglu

check_triton()  # Once per process: the kernels are written for Triton 3.6 and later.

BUILTINS: dict[str, BuiltinKernel] = {k.name: k for k in (
    _matmul, _softmax, _attention, _rmsnorm, _layernorm, _layernorm_bwd, _cross_entropy, _swiglu, _cumsum,
    _grouped_matmul, _fp8_matmul, _add_rmsnorm, _linear_act, _masked_softmax)}


class UnknownKernelError(KeyError):
    """Raised for a kernel name that is not in BUILTINS; prints its message without KeyError's quotes."""

    def __str__(self) -> str:
        return str(self.args[0])


def get(name: str) -> BuiltinKernel:
    """Returns the built-in kernel called `name`, or raises UnknownKernelError listing the names."""
    try:
        return BUILTINS[name]
    except KeyError:
        raise UnknownKernelError(f"there is no built-in kernel named {name!r}; "
                                 f"use one of {', '.join(sorted(BUILTINS))}.") from None


__all__ = ["BUILTINS", "COMPILE_OPTIONS", "ELEMENT_BYTES", "BuiltinKernel", "Config", "Pointer", "Shape",
           "UnknownKernelError", "dtype_name", "get", "specialise", "torch_dtype"]
