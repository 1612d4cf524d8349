"""Imports every module of Liger-Kernel's and flash-linear-attention's (fla-core) Triton ops with
triton.autotune counted (mode "count") or replaced by dr_kernel (mode "ours"), and in mode "ours"
runs two of fla's ops (forward and backward) in Triton's interpreter against torch. Prints one JSON object."""

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
decorated = []
if mode == "count":
    stock = triton.runtime.autotuner.autotune

    def counting(configs, key, **kwargs):
        inner = stock(configs, key, **kwargs)

        def decorator(fn):
            base = fn
            while hasattr(base, "fn"):
                base = base.fn
            decorated.append(f"{base.__module__}.{base.__qualname__}")
            return inner(fn)

        return decorator

    triton.autotune = triton.runtime.autotune = triton.runtime.autotuner.autotune = counting
else:
    dr_kernel.install(widen=False)

failed_imports = []
for package in ("liger_kernel.ops", "fla.ops", "fla.modules"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        try:
            importlib.import_module(info.name)
        except Exception as error:  # noqa: BLE001 -- optional backends (CuTe, cuTile, Ascend) need their toolkits.
            failed_imports.append(f"{info.name}: {type(error).__name__}")
out = {"decorated": sorted(set(decorated)) if mode == "count" else None,
       "taken_over": sorted(set(dr_kernel.taken_over())), "kept": dr_kernel.kept(),
       "failed_imports": sorted(failed_imports)}

if mode == "ours":
    # Liger's autotuned kernels need the GPU (TMA descriptors) or libdevice, which the interpreter
    # lacks; fla's run there. Each result against torch's formula.
    from fla.modules.norm.layernorm import rms_norm
    from fla.ops.utils.cumsum import chunk_global_cumsum

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=g, requires_grad=True)
    w = torch.randn(256, generator=g, requires_grad=True)
    y = rms_norm(x, w, None, eps=1e-6)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    dy = torch.randn(64, 256, generator=g)
    grads = torch.autograd.grad(y, (x, w), dy)
    ref_grads = torch.autograd.grad(ref, (x, w), dy)
    out["rms_norm"] = {"forward": float((y - ref).abs().max()),
                       "backward": max(float((a - b).abs().max()) for a, b in zip(grads, ref_grads, strict=True))}
    s = torch.randn(2, 300, 4, generator=g)
    out["cumsum"] = float((chunk_global_cumsum(s) - s.cumsum(1)).abs().max())
    def tuned(name):
        kernel = getattr(sys.modules[name.rsplit(".", 1)[0]], name.rsplit(".", 1)[1])
        while not hasattr(kernel, "evaluations"):  # Under a @triton.heuristics.
            kernel = kernel.fn
        return kernel

    out["evaluations"] = sum(tuned(m).evaluations for m in out["taken_over"]
                             if m.startswith("fla.modules.norm.layernorm."))
print(json.dumps(out))
