"""Static analysis of a Triton kernel configuration, compiled for a GPU this machine need not have.

analyse() compiles one configuration for the target device's architecture with triton.compile()
and the ptxas that ships in Triton's wheel, then reads what the compiled binary will ask of the
device: registers and spilled bytes per thread (from the cubin's resource table), shared memory
per block (from Triton's metadata), threads per block. From those and the device's limits it
decides whether the configuration can launch at all and what fraction of the SM's warp slots it
can keep busy (theoretical occupancy). A tuner uses this to skip configurations that would fail
at load time, and as features for its cost model, without spending GPU time on them.

Facts about Triton 3.6.0 this module relies on, found by experiment:
- triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32),
  options={...}) needs no GPU. The signature maps every parameter name (constexprs included, as
  "constexpr") to a type string; constexprs maps names to values; attrs maps (index,) tuples to
  [["tt.divisibility", 16]] for the arguments a launch would find 16-divisible.
- The returned CompiledKernel carries metadata.shared (dynamic shared memory in bytes) and the
  IR text of every stage in .asm (ttir, ttgir, llir, ptx, cubin). Its n_regs and n_spills are
  only set by _init_handles(), which loads the binary on a GPU; Triton runs ptxas with -v but
  deletes the log. So registers and spills are read back from the cubin with the bundled
  cuobjdump (-res-usage prints REG and STACK); Triton's loader reports n_spills as the stack
  frame in 4-byte words (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES / 4), so the same division is done.
- The cubin also declares 1 KB of static shared memory whenever a kernel uses shared memory at
  all: that is the block's reserved system area on sm_90, already counted by the device limits.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .kernels.base import COMPILE_OPTIONS, BuiltinKernel, dtype_name, is_gluon, python_function


@dataclass(frozen=True)
class LaunchSource:
    """A kernel exactly as one launch would compile it: what Triton's JIT hands its compiler
    (signature, constexprs and attributes keyed as the JIT keys them, parsed options, target) for
    one call, captured from the call itself (launch.py). Compiled here, it lands in the very
    cache entry the launch looks up, whatever wrappers, heuristics or argument kinds stand between
    the caller and the kernel. `fn` is the @triton.jit function, or its "module:qualname" reference
    while it travels to a compile worker."""

    fn: Any
    signature: dict
    constexprs: dict
    attrs: dict
    options: dict
    target: Any
    # Whether the compile worker also builds the kernel's C launcher (prebuild_launcher); False
    # when a LauncherSource request builds it alongside, once for every config.
    with_launcher: bool = True


@dataclass(frozen=True)
class LauncherSource:
    """The C launcher Triton builds (with the system C compiler, 0.3 s) the first time a process
    launches a kernel signature. Its code depends on the argument types only, so every config of a
    kernel without TMA descriptors shares one; built in a compile worker while the configs compile,
    it is in Triton's cache when the first launch looks for it. `signature` is a LaunchSource's."""

    signature: dict

    @staticmethod
    def of(source: LaunchSource) -> LauncherSource | None:
        """The launcher `source`'s launches need, or None where it cannot be built ahead: not
        CUDA, or TMA descriptor arguments (their launcher code depends on the compiled kernel)."""
        if getattr(source.target, "backend", None) != "cuda":
            return None
        if any(isinstance(t, str) and t.startswith("tensordesc") for t in _flat(source.signature.values())):
            return None
        return LauncherSource(dict(source.signature))


def _flat(types) -> list:
    out = []
    for t in types:
        out.extend(_flat(t) if isinstance(t, tuple) else [t])
    return out


def build_launcher(source: LauncherSource) -> StaticReport:
    """Builds `source`'s launcher into Triton's cache, as CudaLauncher does (Triton 3.6); the
    report is valid when it was built or found there."""
    start = time.perf_counter()
    report = StaticReport(kernel="launcher", config={})
    try:
        from triton.backends.nvidia.driver import include_dirs, libraries, library_dirs, make_launcher
        from triton.runtime.build import compile_module_from_src

        code = make_launcher({}, dict(source.signature), None)
        compile_module_from_src(src=code, name="__triton_launcher", library_dirs=library_dirs(),
                                include_dirs=include_dirs, libraries=libraries)
        report.valid = True
    except Exception as error:  # noqa: BLE001 -- the first launch builds it, as without dr_kernel.
        report.reason = f"the launcher was not built ahead ({type(error).__name__}: {error})"
    report.compile_s = time.perf_counter() - start
    report.phases_s["launcher"] = report.compile_s
    return report


@dataclass(frozen=True)
class DeviceLimits:
    """What one GPU model allows a kernel, for the checks and the occupancy computed here.

    The defaults are those of the NVIDIA H200 (compute capability 9.0); the figures are CUDA's
    occupancy-calculator values for sm_90.
    """

    name: str = "NVIDIA H200"
    arch: int = 90
    sm_count: int = 132
    warp_size: int = 32
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255
    # Registers are handed to warps in units of 256 (8 per thread of a 32-thread warp).
    register_allocation_unit: int = 256
    shared_per_sm: int = 233472
    shared_per_block: int = 232448
    # Every resident block costs 1 KB of shared memory that the system reserves for itself.
    reserved_shared_per_block: int = 1024
    shared_allocation_unit: int = 128
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024
    max_blocks_per_sm: int = 32
    max_warps_per_sm: int = 64
    # Peak throughputs, for the fraction of the device a kernel reaches (0 when unknown): dense
    # tensor-core TFLOP/s by input type (fp32 inputs of tl.dot run as TF32), TFLOP/s of plain
    # fp32 arithmetic (what softmax and RMSNorm compute with), and memory bandwidth in GB/s.
    # The H200 figures are NVIDIA's data-sheet values for the SXM part.
    peak_tflops_fp16: float = 989.0
    peak_tflops_bf16: float = 989.0
    peak_tflops_tf32: float = 494.0
    # e4m3/e5m2 operands: twice the fp16 rate on Hopper and Ada, none on Ampere (0: unknown or absent).
    peak_tflops_fp8: float = 1979.0
    peak_tflops_fp32: float = 67.0
    peak_gbps: float = 4800.0
    # Global memory in bytes, for refusing a problem whose tensors cannot fit (0: unknown). On a
    # visible GPU it is torch's total_memory; the H200's figure is that, read on the project's
    # H200 (nvidia-smi says 143771 MiB there: the driver keeps the rest).
    memory_bytes: int = 150_109_880_320

    def target(self):
        """Returns the Triton compile target for this device."""
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.arch, self.warp_size)

    def peak_tflops(self, dtype: str, tensor_cores: bool) -> float:
        """Returns the peak TFLOP/s a kernel on `dtype` data can reach: the tensor cores' for a
        kernel built on tl.dot, plain fp32 arithmetic otherwise; 0 when unknown."""
        if not tensor_cores:
            return self.peak_tflops_fp32
        return {"fp16": self.peak_tflops_fp16, "bf16": self.peak_tflops_bf16,
                "fp32": self.peak_tflops_tf32, "fp8": self.peak_tflops_fp8}.get(dtype, 0.0)


H200 = DeviceLimits()

# Other GPUs a configuration can be analysed for without having them: the figures are CUDA's
# occupancy-calculator values for each compute capability (CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability") and the SM counts and peaks of NVIDIA's data sheets
# (dense tensor-core rates, i.e. without 2:4 sparsity). Every one of them reserves 1 KB of shared
# memory per block, as sm_90 does. Their memory is nvidia-smi's memory.total for each model as
# published by its users (A100-SXM4-80GB 81920 MiB, L40S 46068 MiB, B200 183359 MiB, H100 80GB HBM3
# and PCIe 81559 MiB; the data sheets say 80, 48, 180 and 80 GB; none was read here): a little more
# than a program can allocate (on the H200 torch's total is 143156 MiB of nvidia-smi's 143771), so
# a problem refused for one of them cannot fit, and one just below may not either.
# The H100 is the H200's chip with HBM3 (SXM5: the same SMs, clocks and limits) or, as a PCIe card,
# with 114 SMs at lower clocks.
H100 = DeviceLimits(name="NVIDIA H100 80GB HBM3", peak_gbps=3350.0, memory_bytes=81559 * 2**20)
H100_PCIE = DeviceLimits(
    name="NVIDIA H100 PCIe", sm_count=114,
    peak_tflops_fp16=756.0, peak_tflops_bf16=756.0, peak_tflops_tf32=378.0, peak_tflops_fp32=51.2,
    peak_tflops_fp8=1513.0, peak_gbps=2000.0, memory_bytes=81559 * 2**20)
A100 = DeviceLimits(
    name="NVIDIA A100-SXM4-80GB", arch=80, sm_count=108,
    # 164 KB per SM; a block may opt in to 163 KB of it.
    shared_per_sm=167936, shared_per_block=166912,
    peak_tflops_fp16=312.0, peak_tflops_bf16=312.0, peak_tflops_tf32=156.0, peak_tflops_fp32=19.5,
    peak_tflops_fp8=0.0,
    peak_gbps=2039.0, memory_bytes=81920 * 2**20)
L40S = DeviceLimits(
    name="NVIDIA L40S", arch=89, sm_count=142,
    # Ada: 100 KB per SM, 99 KB per block; 1536 threads (48 warps) and 24 blocks per SM.
    shared_per_sm=102400, shared_per_block=101376, max_threads_per_sm=1536, max_warps_per_sm=48,
    max_blocks_per_sm=24,
    peak_tflops_fp16=362.0, peak_tflops_bf16=362.0, peak_tflops_tf32=183.0, peak_tflops_fp32=91.6,
    peak_tflops_fp8=733.0,
    peak_gbps=864.0, memory_bytes=46068 * 2**20)
B200 = DeviceLimits(
    name="NVIDIA B200", arch=100, sm_count=148,
    # Blackwell keeps Hopper's 228 KB per SM and 227 KB per block.
    shared_per_sm=233472, shared_per_block=232448,
    peak_tflops_fp16=2250.0, peak_tflops_bf16=2250.0, peak_tflops_tf32=1125.0, peak_tflops_fp32=75.0,
    peak_tflops_fp8=4500.0,
    peak_gbps=8000.0, memory_bytes=183359 * 2**20)

# The devices `named_limits` knows, by the names a user types: the model and its architecture.
KNOWN_DEVICES: dict[str, DeviceLimits] = {
    "h200": H200, "sm_90": H200, "h100": H100, "h100_pcie": H100_PCIE, "a100": A100, "sm_80": A100,
    "l40s": L40S, "sm_89": L40S, "b200": B200, "sm_100": B200,
}


def named_limits(name: str) -> DeviceLimits:
    """Returns the limits of a GPU this machine need not have, by model or architecture name
    (h200, h100, h100-pcie, a100, l40s, b200, or sm_90, sm_80, sm_89, sm_100; case and "sm"/"sm_" do
    not matter; sm_90 is the H200)."""
    key = name.strip().lower().replace("-", "_")
    if key.startswith("sm") and not key.startswith("sm_"):
        key = "sm_" + key[2:]
    limits = KNOWN_DEVICES.get(key)
    if limits is None:
        raise ValueError(f"no limits are known for the device {name!r}; use one of {', '.join(KNOWN_DEVICES)}.")
    return limits


def device_limits(device: Any = 0) -> DeviceLimits:
    """Returns the limits of a visible CUDA device, read through torch where torch exposes them.

    An H200 (or any device whose name contains "H200") gets the H200 constants; an H100 (80GB HBM3
    or PCIe), A100-SXM4-80GB, L40S or B200 gets that model's constants (peaks included) under its
    own name. Other devices get their own compute capability, SM count, shared memory, registers
    and threads; what torch does not report keeps the sm_90 value, and the peak figures are 0
    (unknown) because no API tells them.
    Every device's memory is its own total_memory.
    """
    import torch

    props = torch.cuda.get_device_properties(device)
    memory = props.total_memory if isinstance(getattr(props, "total_memory", None), int) else 0
    if "H200" in props.name:
        return H200 if memory in (0, H200.memory_bytes) else replace(H200, memory_bytes=memory)
    arch = props.major * 10 + props.minor
    for limits in (H100, H100_PCIE, A100, L40S, B200):
        # Other variants of a model (an A100 with 40 GB, a PCIe card) differ in bandwidth or clocks.
        if limits.name.removeprefix("NVIDIA ") in props.name and arch == limits.arch:
            return replace(limits, name=props.name, sm_count=props.multi_processor_count,
                           memory_bytes=memory or limits.memory_bytes)
    fields = {"name": props.name, "arch": arch, "sm_count": props.multi_processor_count, "memory_bytes": memory,
              "peak_tflops_fp16": 0.0, "peak_tflops_bf16": 0.0, "peak_tflops_tf32": 0.0, "peak_tflops_fp32": 0.0,
              "peak_tflops_fp8": 0.0, "peak_gbps": 0.0}
    for ours, theirs in (("warp_size", "warp_size"), ("registers_per_sm", "regs_per_multiprocessor"),
                         ("shared_per_sm", "shared_memory_per_multiprocessor"),
                         ("shared_per_block", "shared_memory_per_block_optin"),
                         ("max_threads_per_sm", "max_threads_per_multi_processor")):
        value = getattr(props, theirs, None)
        if isinstance(value, int) and value > 0:
            fields[ours] = value
    if "max_threads_per_sm" in fields:
        fields["max_warps_per_sm"] = fields["max_threads_per_sm"] // fields.get("warp_size", 32)
    return DeviceLimits(**fields)



def throughput(flops: float, moved_bytes: float, ms: float, peak_tflops: float, peak_gbps: float) -> dict[str, Any]:
    """Returns what a launch of `ms` milliseconds achieves on a problem of `flops` operations that
    must move `moved_bytes`: TFLOP/s, GB/s, each as a fraction of the device's peak (None when the
    peak is unknown), and `fraction_of_peak`, the roofline's verdict: the larger of the two, i.e.
    the time the device could not beat divided by the time taken. `bound` names the resource the
    roofline says limits the problem."""
    tflops = flops / (ms * 1e-3) / 1e12
    gbps = moved_bytes / (ms * 1e-3) / 1e9
    compute = tflops / peak_tflops if peak_tflops > 0 else None
    memory = gbps / peak_gbps if peak_gbps > 0 else None
    known = [f for f in (compute, memory) if f is not None]
    bound = None
    if compute is not None and memory is not None:
        bound = "compute" if flops / peak_tflops / 1e12 >= moved_bytes / peak_gbps / 1e9 else "memory"
    return {"tflops": tflops, "gbps": gbps, "peak_tflops": peak_tflops or None, "peak_gbps": peak_gbps or None,
            "fraction_of_peak_compute": compute, "fraction_of_peak_memory": memory,
            "fraction_of_peak": max(known) if known else None, "bound": bound}


def roofline_ms(flops: float, moved_bytes: float, peak_tflops: float, peak_gbps: float) -> float | None:
    """Returns the fewest milliseconds the device's peaks allow for a problem, or None if unknown."""
    if peak_tflops <= 0 or peak_gbps <= 0:
        return None
    return max(flops / (peak_tflops * 1e12), moved_bytes / (peak_gbps * 1e9)) * 1e3

@dataclass
class StaticReport:
    """What compiling one configuration revealed, before any launch.

    `valid` is False when the configuration cannot run on the device (too much shared memory,
    too many threads or registers per block) or did not compile; `reason` then says why in one
    sentence. `occupancy` is the theoretical fraction of the SM's warp slots the kernel can fill
    (active_warps / max_warps_per_sm) and `limiter` names the resource that bounds it.
    `binary_hash` identifies the compiled binary together with the launch settings it needs, so
    that configurations that compile to the same kernel can be measured once.
    """

    kernel: str
    config: dict[str, Any]
    shape: dict[str, Any] | None = None
    dtype: str | None = None
    valid: bool = False
    reason: str = ""
    n_regs: int | None = None
    n_spills: int | None = None
    shared: int | None = None
    threads: int | None = None
    blocks_per_sm: int | None = None
    active_warps: int | None = None
    occupancy: float | None = None
    limiter: str | None = None
    compile_s: float | None = None
    cache_hit: bool | None = None
    binary_hash: str | None = None
    ttgir: str | None = field(default=None, repr=False)
    # The worker's seconds by part: the compile itself, building the C launcher, reading the
    # binary's resource usage.
    phases_s: dict[str, float] = field(default_factory=dict, repr=False)

    def to_dict(self, with_ir: bool = False) -> dict[str, Any]:
        """Returns the report as plain data; the IR text is left out unless asked for."""
        data = asdict(self)
        data.pop("phases_s")  # Timing of one worker, not a property of the config.
        if not with_ir:
            data.pop("ttgir")
        return data


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of a kernel one SM holds at once, and which resource stops it holding more."""

    blocks_per_sm: int
    active_warps: int
    occupancy: float
    limiter: str


def occupancy(n_regs: int, shared: int, num_warps: int, device: DeviceLimits = H200) -> Occupancy:
    """Returns the theoretical occupancy of a kernel with `n_regs` registers per thread, `shared`
    bytes of dynamic shared memory per block and `num_warps` warps per block on `device`.

    Each resource gives the most blocks it lets one SM hold; the smallest wins. Registers are
    allocated per warp, rounded up to the allocation unit; shared memory per block is the dynamic
    amount plus the reserved 1 KB, rounded up to the allocation unit.
    """
    limits = {"blocks": device.max_blocks_per_sm,
              "threads": device.max_threads_per_sm // (num_warps * device.warp_size)}
    if n_regs > 0:
        unit = device.register_allocation_unit
        registers_per_warp = -(-n_regs * device.warp_size // unit) * unit
        limits["registers"] = (device.registers_per_sm // registers_per_warp) // num_warps
    unit = device.shared_allocation_unit
    shared_per_block = -(-(shared + device.reserved_shared_per_block) // unit) * unit
    limits["shared memory"] = device.shared_per_sm // shared_per_block
    # The first resource in this order wins ties, so that the limiter named is the one a user
    # can act on (registers and shared memory before the fixed per-SM counts).
    order = ["registers", "shared memory", "threads", "blocks"]
    limiter = min((name for name in order if name in limits), key=lambda name: limits[name])
    blocks = max(0, limits[limiter])
    warps = blocks * num_warps
    return Occupancy(blocks, warps, warps / device.max_warps_per_sm, limiter)


def launch_problem(n_regs: int, shared: int, num_warps: int, device: DeviceLimits = H200) -> str:
    """Returns why a block with these resources cannot launch on `device`, or "" if it can."""
    threads = num_warps * device.warp_size
    if shared > device.shared_per_block:
        return (f"needs {shared} B of shared memory; the {device.name} allows {device.shared_per_block} B "
                "per block: lower num_stages or the block sizes.")
    if threads > device.max_threads_per_block:
        return (f"needs {threads} threads per block; the {device.name} allows "
                f"{device.max_threads_per_block}: lower num_warps.")
    unit = device.register_allocation_unit
    registers = -(-n_regs * device.warp_size // unit) * unit * num_warps
    if registers > device.registers_per_sm:
        return (f"needs {registers} registers per block ({n_regs} per thread); the {device.name} has "
                f"{device.registers_per_sm} per SM: lower num_warps or the block sizes.")
    return ""


# ----- reading the compiled binary -------------------------------------------------------------

_RESOURCE_LINE = re.compile(r"REG:(\d+)\s+STACK:(\d+)")
_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame")


def _tool_path(name: str) -> str:
    from triton import knobs

    return getattr(knobs.nvidia, name).path


def binary_resources(cubin: bytes, ptx: str | None = None, device: DeviceLimits = H200) -> tuple[int, int]:
    """Returns (registers per thread, spilled 4-byte words per thread) of a compiled kernel.

    The bundled cuobjdump reads them from the cubin in milliseconds; if it is missing or fails,
    the PTX is assembled again with ptxas -v, which costs as much as the first assembly did.
    """
    with tempfile.TemporaryDirectory(prefix="dr_kernel_") as folder:
        path = os.path.join(folder, "kernel.cubin")
        with open(path, "wb") as handle:
            handle.write(cubin)
        with contextlib.suppress(OSError, subprocess.SubprocessError, RuntimeError):
            result = subprocess.run([_tool_path("cuobjdump"), "-res-usage", path], capture_output=True,
                                    text=True, timeout=60)
            match = _RESOURCE_LINE.search(result.stdout)
            if result.returncode == 0 and match:
                return int(match.group(1)), int(match.group(2)) // 4
        if ptx is None:
            raise RuntimeError("cuobjdump could not read the cubin's resource usage and no PTX was given.")
        ptx_path = os.path.join(folder, "kernel.ptx")
        with open(ptx_path, "w") as handle:
            handle.write(ptx)
        suffix = "a" if device.arch >= 90 else ""
        result = subprocess.run([_tool_path("ptxas"), "-v", f"--gpu-name=sm_{device.arch}{suffix}", ptx_path,
                                 "-o", os.path.join(folder, "again.cubin")], capture_output=True, text=True)
        registers, stack = _PTXAS_REGISTERS.search(result.stderr), _PTXAS_STACK.search(result.stderr)
        if result.returncode != 0 or registers is None:
            raise RuntimeError(f"ptxas -v failed: {result.stderr.strip()[-500:]}")
        return int(registers.group(1)), (int(stack.group(1)) if stack else 0) // 4


def binary_hash(cubin: bytes, shared: int, num_warps: int, num_ctas: int = 1) -> str:
    """Returns a hash that is equal for two compiled kernels exactly when launching them is the
    same thing: the same machine code with the same dynamic shared memory and block size. The
    cubin already encodes the block size (.reqntid) but not the shared memory a launch requests,
    so that is hashed with it."""
    digest = hashlib.sha256(cubin)
    digest.update(f"|shared={shared}|warps={num_warps}|ctas={num_ctas}".encode())
    return digest.hexdigest()[:32]


# ----- compiling -------------------------------------------------------------------------------

def _as_compilable(fn: Any) -> Any:
    # A kernel decorated while TRITON_INTERPRET=1 is an InterpretedFunction, which triton.compile
    # cannot take; wrapping its Python function in a JITFunction gives the same kernel compiled.
    from triton.runtime.jit import JITFunction

    return fn if isinstance(fn, JITFunction) else JITFunction(python_function(fn))


def prebuild_launcher(compiled: Any) -> None:
    """Builds the C launcher of a compiled CUDA kernel into Triton's cache, where the launching
    process's first launch finds it: Triton compiles one with the system C compiler for every new
    kernel signature (0.3 s on the H200 machine), in the launching process, after the kernel's own
    compile. Done here, in a compile worker, it costs the launch nothing. Best effort: without a
    CUDA driver library or a C compiler the launch builds it as usual."""
    try:
        from triton.backends.nvidia.driver import CudaLauncher

        if compiled.metadata.target.backend == "cuda":
            CudaLauncher(compiled.src, compiled.metadata)
    except Exception:  # noqa: BLE001,S110 -- only a speed-up; the launch builds what is missing.
        pass


def _root_cause(error: BaseException) -> BaseException:
    """The last exception of `error`'s chain of causes (`raise ... from`), or `error` itself."""
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
    return error


def _error_summary(error: BaseException, limit: int = 600) -> str:
    # Compiler errors carry the kernel's source up to the failing line and ptxas errors the whole log
    # and the command that reruns it; the lines that name the failure are what a user needs, and the
    # cause comes last: never cut it off.
    lines = [" ".join(line.split()) for line in str(error).splitlines()]
    lines = [line for line in lines if line]
    carets = [i for i, line in enumerate(lines) if line == "^"]
    if carets and carets[-1] > 0:
        # Triton's CompilationError: "at LINE:COL:", the source down to the failing line, a caret
        # under it, then the cause. Keep the place, the failing line and the cause.
        c = carets[-1]
        lines = [f"{lines[0]} {lines[c - 1]}:" if lines[0].startswith("at ") and c > 1 else f"{lines[c - 1]}:",
                 *lines[c + 1:]]
    elif len(" ".join(lines)) > limit:
        # ptxas and other tools: the first line says what failed, the error lines say why.
        errors = [line for line in lines[1:] if re.search(r"\b(error|fatal)\b", line, re.IGNORECASE)]
        lines = lines[:1] + errors if errors else lines
    text = " ".join(lines)
    root = _root_cause(error)
    if root is not error:
        # A compile error raised inside a function the kernel calls (a Gluon partition, in Triton
        # 3.7 and later) may keep its cause only in the chain: "at 35:4: gl.warp_specialize([" is no
        # reason, "async_copy_shared_to_global has been removed; call async_store" is.
        cause = " ".join(" ".join(line.split()) for line in str(root).splitlines()[:1])
        if cause and cause not in text:
            text = f"{text} (caused by {type(root).__name__}: {cause})"
    if len(text) > limit:  # Keep the start (what failed) and the end (the cause).
        head = limit // 3
        text = text[:head] + " … " + text[-(limit - head):]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _CacheWatch:
    """Learns from Triton's compilation listener whether a compile was served from its disk cache."""

    def __init__(self) -> None:
        self.cache_hit: bool | None = None

    def __call__(self, *, cache_hit: bool, **_: Any) -> None:
        self.cache_hit = cache_hit


def compile_kernel(fn: Any, signature: Mapping[str, str], constexprs: Mapping[str, Any],
                   attrs: Mapping | None, options: Mapping[str, Any], device: DeviceLimits = H200,
                   target: Any = None):
    """Compiles a @triton.jit function for `device` and returns (CompiledKernel, cache_hit).

    Triton prints the whole PTX to stdout when ptxas fails; that print is swallowed here because
    the exception carries the message and a pool of workers would otherwise flood the terminal.
    """
    import triton
    from triton import knobs
    from triton.compiler import ASTSource

    if is_gluon(fn):
        from triton.experimental.gluon._runtime import GluonASTSource as ASTSource
    source = ASTSource(fn=_as_compilable(fn), signature=dict(signature), constexprs=dict(constexprs),
                       attrs=dict(attrs or {}))
    watch, previous = _CacheWatch(), knobs.compilation.listener
    knobs.compilation.listener = watch
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            compiled = triton.compile(source, target=target or device.target(), options=dict(options))
    finally:
        knobs.compilation.listener = previous
    return compiled, watch.cache_hit


def analyse(kernel: BuiltinKernel | LaunchSource | tuple, shape: Mapping[str, Any] | None = None, dtype: Any = "fp16",
            config: Mapping[str, Any] | None = None, device: DeviceLimits = H200) -> StaticReport:
    """Compiles one configuration for `device` without a GPU and returns what it asks of the device.

    `kernel` is a BuiltinKernel (then `shape`, `dtype` and `config` describe the problem and the
    configuration) or a tuple (fn, signature, constexprs) or (fn, signature, constexprs, attrs)
    for any @triton.jit function (then the kernel parameters in `config` are added to the
    constexprs, and its num_warps/num_stages are the compile options), or a LaunchSource (compiled
    as it stands: `config` only labels the report). A configuration that does
    not compile, or that compiles but cannot launch, gives valid=False with the reason; compile
    problems never raise. Malformed requests (unknown config keys, wrong shape keys, an unknown
    dtype) raise ValueError naming the input, because they are mistakes rather than findings.
    """
    config = dict(config or {})
    if isinstance(kernel, BuiltinKernel):
        name = kernel.name
        config = kernel.check_config(config)
        shape = kernel.check_shape(shape or {})
        dtype = dtype_name(dtype)
        fn = kernel.fn_for(config, shape)
        signature, constexprs, attrs = kernel.compile_source(shape, dtype, config)
    elif isinstance(kernel, LaunchSource):
        name = python_function(kernel.fn).__name__
        fn, signature, constexprs, attrs = kernel.fn, kernel.signature, kernel.constexprs, kernel.attrs
    elif isinstance(kernel, tuple) and len(kernel) in (3, 4):
        fn, signature, constexprs = kernel[:3]
        attrs = kernel[3] if len(kernel) == 4 else {}
        name = python_function(fn).__name__
        constexprs = dict(constexprs)
        signature = dict(signature)
        for key, value in config.items():
            if key not in COMPILE_OPTIONS:
                constexprs[key] = value
                signature.setdefault(key, "constexpr")
    else:
        raise TypeError(f"kernel {kernel!r} is neither a BuiltinKernel nor a tuple "
                        "(fn, signature, constexprs); pass one of those.")
    options = {k: config[k] for k in COMPILE_OPTIONS if k in config}
    target = device.target()
    if isinstance(kernel, LaunchSource):
        options, target = kernel.options, kernel.target
    report = StaticReport(kernel=name, config=config, shape=dict(shape) if shape else None,
                          dtype=dtype if isinstance(dtype, str) else None)

    start = time.perf_counter()
    try:
        compiled, report.cache_hit = compile_kernel(fn, signature, constexprs, attrs, options, device, target)
    except Exception as error:  # noqa: BLE001 - every compiler failure is a finding, not a crash.
        report.compile_s = time.perf_counter() - start
        report.reason = f"did not compile: {_error_summary(error)}"
        return report
    report.phases_s["compile"] = time.perf_counter() - start
    if isinstance(kernel, LaunchSource) and kernel.with_launcher and not report.cache_hit:
        prebuild_launcher(compiled)
        report.phases_s["launcher"] = time.perf_counter() - start - report.phases_s["compile"]
    report.compile_s = time.perf_counter() - start

    metadata = compiled.metadata
    report.shared = int(metadata.shared or 0)
    num_warps = int(metadata.num_warps)
    report.threads = num_warps * device.warp_size
    report.ttgir = compiled.asm.get("ttgir")
    report.binary_hash = binary_hash(compiled.kernel, report.shared, num_warps, int(metadata.num_ctas))
    read = time.perf_counter()
    try:
        report.n_regs, report.n_spills = binary_resources(compiled.kernel, compiled.asm.get("ptx"), device)
    except Exception as error:  # noqa: BLE001 - an unreadable binary is reported, not raised.
        report.reason = f"compiled, but its resource usage could not be read: {_error_summary(error)}"
        return report
    finally:
        report.phases_s["resources"] = time.perf_counter() - read

    fit = occupancy(report.n_regs, report.shared, num_warps, device)
    report.blocks_per_sm, report.active_warps = fit.blocks_per_sm, fit.active_warps
    report.occupancy, report.limiter = fit.occupancy, fit.limiter
    report.reason = launch_problem(report.n_regs, report.shared, num_warps, device)
    report.valid = report.reason == "" and fit.blocks_per_sm > 0
    if report.valid is False and not report.reason:
        report.reason = f"no block fits on one SM of the {device.name}: lower the block sizes or num_warps."
    return report
