"""Imports every module of a library's Triton ops with triton.autotune counted (mode "count") or
replaced by dr_kernel (mode "ours", or "defer": install(defer=True)), and in modes "ours" and "defer"
runs some of its ops in Triton's interpreter against torch. Prints one JSON object.

    library_takeover.py count|ours|defer [liger-fla|torchao|cce|gemlite|mamba]

liger-fla (the default): Liger-Kernel's and flash-linear-attention's (fla-core) ops (fla's own
subclass of Triton's Autotuner counted as it is built), three of fla's run forward and backward.
torchao: every torchao module, its INT8 GEMM (27 configs) run. cce: Cut Cross-Entropy
(cut-cross-entropy) with CCE_AUTOTUNE=1, nothing run (its kernels call libdevice, which the
interpreter lacks, tuned or not; benchmarks/library_bench.py runs them on the GPU).
gemlite: GemLite's modules, imported as on an sm_90 machine (it asks the GPU its capability, its
SMs, its shared memory and Triton's target as it imports: a stand-in answers), then imported again
by its own set_autotune("max"), which reloads its kernel modules with longer lists; nothing run
(Triton 3.6's interpreter cannot run its GEMMs, tuned or not: int1 arguments). mamba: mamba-ssm's
modules (its package imported without its __init__, which loads its CUDA extension and transformers;
its Triton ops need neither), Mamba2's chunked scan (SSD) run forward and backward against the
library's own torch reference."""

import importlib
import json
import os
import pkgutil
import sys
import warnings

os.environ["TRITON_INTERPRET"] = "1"
warnings.simplefilter("ignore")
import dr_kernel  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.runtime.autotuner  # noqa: E402

mode = sys.argv[1]
library = sys.argv[2] if len(sys.argv) > 2 else "liger-fla"
packages = {"liger-fla": ("liger_kernel.ops", "fla.ops", "fla.modules"), "torchao": ("torchao",),
            "cce": ("cut_cross_entropy",), "gemlite": ("gemlite",), "mamba": ("mamba_ssm",)}[library]
if library == "gemlite":
    from types import SimpleNamespace

    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    class _StandInDriver:
        """What GemLite asks of the driver as it imports and prunes: an H200's answers."""

        utils = SimpleNamespace(get_device_properties=lambda device: {"max_shared_mem": 232448,
                                                                      "multiprocessor_count": 132})

        def get_current_device(self):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    driver._active = _StandInDriver()
    torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)
    torch.cuda.get_device_properties = lambda *args, **kwargs: SimpleNamespace(
        name="NVIDIA H200", multi_processor_count=132, major=9, minor=0)
if library == "mamba":
    import contextlib
    import importlib.util
    from types import ModuleType, SimpleNamespace

    # mamba_ssm/__init__.py imports its selective-scan CUDA extension (not built: no nvcc here) and,
    # through its model classes, transformers; the Triton kernels' modules need neither. The
    # package is registered without running it, so that each module imports as it would.
    spec = importlib.util.find_spec("mamba_ssm")
    package = ModuleType("mamba_ssm")
    package.__path__, package.__spec__ = list(spec.submodule_search_locations), spec
    sys.modules["mamba_ssm"] = package
    # Its launches run under torch.cuda.device(tensor.device.index) and size some grids by the SM
    # count: a CPU tensor has no index, and the CPU build of torch no device properties.
    torch.cuda.device = lambda index: contextlib.nullcontext()
    torch.cuda.get_device_properties = lambda *args, **kwargs: SimpleNamespace(
        name="NVIDIA H200", multi_processor_count=132, major=9, minor=0)
if library == "cce":
    # Cut Cross-Entropy decorates its kernels with triton.autotune only when asked to (else with
    # fixed configs under @triton.heuristics).
    os.environ["CCE_AUTOTUNE"] = "1"
decorated = []
if mode == "count":
    stock = triton.runtime.autotuner.autotune

    def kernel_name(fn) -> str:  # The @triton.jit function's, under any @triton.heuristics.
        while hasattr(fn, "fn"):
            fn = fn.fn
        return f"{fn.__module__}.{fn.__qualname__}"

    def counting(configs, key, **kwargs):
        inner = stock(configs, key, **kwargs)

        def decorator(fn):
            decorated.append(kernel_name(fn))
            return inner(fn)

        return decorator

    triton.autotune = triton.runtime.autotune = triton.runtime.autotuner.autotune = counting
    # A library's own subclass of Triton's Autotuner, constructed by the library's decorator
    # (fla's fla_cache_autotune), never passes through triton.autotune: counted as it is built.
    stock_init = triton.runtime.autotuner.Autotuner.__init__

    def counting_init(self, fn, *args, **kwargs):
        stock_init(self, fn, *args, **kwargs)
        if type(self) is not triton.runtime.autotuner.Autotuner:
            decorated.append(f"{kernel_name(fn)} ({type(self).__module__}.{type(self).__qualname__})")

    triton.runtime.autotuner.Autotuner.__init__ = counting_init
else:
    dr_kernel.install(widen=False, defer=mode == "defer")

failed_imports = []
for package in packages:
    root = importlib.import_module(package)
    # A subpackage whose import fails (walk_packages imports packages to look inside) is skipped.
    for info in pkgutil.walk_packages(root.__path__, package + ".",
                                      onerror=lambda name: failed_imports.append(f"{name}: package")):
        try:
            importlib.import_module(info.name)
        except Exception as error:  # noqa: BLE001 -- optional backends (CuTe, cuTile, Ascend, MPS) and
            # torchao's optional dependencies (transformers, lm_eval, a CUDA build of torch) are missing.
            failed_imports.append(f"{info.name}: {type(error).__name__}")
if library == "gemlite":
    import gemlite

    # Its documented switch to longer lists reloads its kernel modules: every kernel is decorated
    # anew, and must be taken over anew.
    before = len(decorated) if mode == "count" else len(dr_kernel.taken_over())
    gemlite.set_autotune("max")
    from gemlite.triton_kernels import gemm_kernels

    reloaded = gemm_kernels.gemm_INT_kernel
    counted_again = (len(decorated) if mode == "count" else len(dr_kernel.taken_over())) - before
    lists = len(reloaded.configs)
out = {"decorated": sorted(set(decorated)) if mode == "count" else None,
       "taken_over": sorted(set(dr_kernel.taken_over())), "kept": dr_kernel.kept(),
       "failed_imports": sorted(failed_imports)}

if library == "gemlite":
    out["reloaded"] = {"decorated_again": counted_again, "gemm_list": lists, "type": type(reloaded).__module__}
if mode == "ours" and library == "torchao":
    # Its INT8 GEMM for quantised training (heuristics below autotune, 27 configs), called as its
    # CUDA implementation calls it: exact in integers, then scaled by rows and columns.
    from torchao.prototype.quantized_training.int8_mm import _scaled_int8_mm_kernel, scaled_int8_mm_cuda

    g = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (64, 96), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (96, 80), generator=g, dtype=torch.int8)
    rows, cols = torch.rand(64, generator=g), torch.rand(80, generator=g)
    ref = (a.double() @ b.double()) * rows.double()[:, None] * cols.double()[None, :]
    got = scaled_int8_mm_cuda(a, b, rows, cols)
    out["int8_mm"] = float((got.double() - ref).abs().max() / ref.abs().max())
    out["evaluations"] = _scaled_int8_mm_kernel.evaluations
elif mode in ("ours", "defer") and library == "liger-fla":
    # Liger's autotuned kernels need the GPU (TMA descriptors) or libdevice, which the interpreter
    # lacks; fla's run there. Each result against torch's formula.
    from fla.modules.norm.layernorm import rms_norm
    from fla.ops.utils.cumsum import chunk_global_cumsum

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=g, requires_grad=True)
    w = torch.randn(256, generator=g, requires_grad=True)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    dy = torch.randn(64, 256, generator=g)
    ref_grads = torch.autograd.grad(ref, (x, w), dy)

    def rms_norm_errors():
        y = rms_norm(x, w, None, eps=1e-6)
        grads = torch.autograd.grad(y, (x, w), dy)
        return {"forward": float((y - ref).abs().max()),
                "backward": max(float((a - b).abs().max()) for a, b in zip(grads, ref_grads, strict=True))}

    out["rms_norm"] = rms_norm_errors()
    if mode == "defer":  # Each forward and backward again until their keys are tuned; each must agree.
        import time

        out["pending_after_first"] = len(dr_kernel.pending_tunings())
        calls, deadline = 1, time.monotonic() + 300
        while dr_kernel.pending_tunings() and time.monotonic() < deadline:
            errors = rms_norm_errors()
            out["rms_norm"] = {k: max(v, errors[k]) for k, v in out["rms_norm"].items()}
            calls += 1
        out["calls"], out["pending_at_end"] = calls, len(dr_kernel.pending_tunings())
    s = torch.randn(2, 300, 4, generator=g)
    out["cumsum"] = float((chunk_global_cumsum(s) - s.cumsum(1)).abs().max())
    if mode == "ours":
        # fla's L2 norm: its two kernels' autotuners are fla's own (fla_cache_autotune).
        from fla.modules.norm.l2norm import l2norm, l2norm_bwd_kernel, l2norm_fwd_kernel

        x2 = torch.randn(300, 64, generator=g, requires_grad=True)
        dy2 = torch.randn(300, 64, generator=g)
        y2 = l2norm(x2)
        ref2 = torch.nn.functional.normalize(x2, dim=-1, eps=1e-6)
        grad2, ref_grad2 = (torch.autograd.grad(t, (x2,), dy2)[0] for t in (y2, ref2))
        out["l2norm"] = {"forward": float((y2 - ref2).abs().max()), "backward": float((grad2 - ref_grad2).abs().max()),
                         "evaluations": [k._dr_kernel.evaluations for k in (l2norm_fwd_kernel, l2norm_bwd_kernel)]}

    def tuned(name):
        kernel = getattr(sys.modules[name.rsplit(".", 1)[0]], name.rsplit(".", 1)[1])
        while not hasattr(kernel, "evaluations"):  # Under a @triton.heuristics.
            kernel = kernel.fn
        return kernel

    out["evaluations"] = sum(tuned(m).evaluations for m in out["taken_over"]
                             if m.startswith("fla.modules.norm.layernorm."))
if mode == "ours" and library == "mamba":
    # Mamba2's chunked scan as its layer calls it (softplus on dt, a skip D), forward and backward,
    # against mamba-ssm's own reference in torch: 14 autotuned kernels, each tuned by dr_kernel.
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined, ssd_chunk_scan_combined_ref

    g = torch.Generator().manual_seed(0)
    batch, length, heads, head_dim, state, chunk = 1, 128, 2, 16, 16, 64

    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).requires_grad_()

    x, dt, a = leaf(batch, length, heads, head_dim), leaf(batch, length, heads, scale=0.5), leaf(heads)
    b, c, d = leaf(batch, length, 1, state), leaf(batch, length, 1, state), leaf(heads)
    a_neg = -a.abs()  # A < 0: a decaying state, as the layer's -exp(A_log).
    inputs = (x, dt, a, b, c, d)
    y = mamba_chunk_scan_combined(x, dt, a_neg, b, c, chunk, D=d, dt_softplus=True)
    ref = ssd_chunk_scan_combined_ref(x, dt, a_neg, b, c, chunk, D=d, dt_softplus=True)
    dy = torch.randn(y.shape, generator=g)
    grads = torch.autograd.grad(y, inputs, dy, retain_graph=True)  # a_neg is shared with ref.
    ref_grads = torch.autograd.grad(ref, inputs, dy)
    out["ssd"] = {"forward": float((y - ref).abs().max() / ref.abs().max()),
                  "backward": max(float((u - v).abs().max() / v.abs().max())
                                  for u, v in zip(grads, ref_grads, strict=True))}
    used, wrong = set(), {}
    for name in out["taken_over"]:
        kernel = getattr(sys.modules[name.rsplit(".", 1)[0]], name.rsplit(".", 1)[1])
        while not hasattr(kernel, "evaluations"):
            kernel = kernel.fn
        if kernel.evaluations:
            used.add(name)
            judged = sum(1 for _, m, _ in kernel.history if m["status"] == "wrong")
            if judged:
                wrong[name] = judged
    out["tuned_kernels"] = sorted(used)
    # Configs judged wrong: four of its backward kernels write one partial sum per tile into buffers
    # sized for the list's smallest tile and read best_config back to sum them (checking.py).
    out["wrong"] = wrong
print(json.dumps(out))
