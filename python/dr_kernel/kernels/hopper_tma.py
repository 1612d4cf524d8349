"""Hopper's TMA copies for the Gluon kernels, under every Triton version dr_kernel supports.

Triton 3.6 names them `tma.async_copy_global_to_shared` and `tma.async_copy_shared_to_global`;
Triton 3.7 and later name them `tma.async_load` and `tma.async_store` (same arguments) and make
the old names raise at compile time. Gluon kernels call `tma_load` and `tma_store` instead.
"""

from triton.experimental.gluon.language.nvidia.hopper import tma

tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
