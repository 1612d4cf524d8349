"""First call and steady state of real libraries' autotuned ops: stock triton.autotune against
dr_kernel's drop-in (install(), no edit of the library), on the GPU.

    python3 benchmarks/library_bench.py --out DIR [--ops gems_layer_norm,...] [--modes stock,dr,widen,ceiling] [--warm]

Each (op, mode) runs in a fresh process with a fresh Triton cache and a fresh results store, so
every first call compiles and tunes from nothing. Mode `floor` keeps only each list's first config
(nothing is timed): first call minus floor is what tuning cost. An op is one forward and one
backward at an LLM shape (bf16, 8192 tokens); GemLite's two (not in the default list: an inference
library) are one forward, of 8192 tokens or of one, and so is fla's gated delta rule
(`fla_gated_delta_rule`, not in the default list); mamba-ssm's Mamba2 scan (`mamba2_ssd`, not in the
default list until it has run on a GPU) is one forward and backward of 8192 tokens. Per run: the
first call's wall time (inputs ready, synchronised), then the steady-state step (median of 50 timed
steps after 10 warm-ups, CUDA events) and its GPU time (the summed durations of its kernels,
profiler, median of 20 steps), how many of the library's autotuned kernels dr_kernel took over and
how many it handed back. Mode `defer` is dr with install(defer=True): the first call launches each list's first
config while the lists compile, and each key is tuned on a later call; after the first call the
op's steps run (each synchronised) until no tuning is pending, and the row says how long that took
(`settle_s`, `settle_steps`) and what those steps cost beyond as many steady ones (`pause_s`).
Mode `widen` is install(widen=True). Mode `ceiling` asks what widening could give at most: the
same widened spaces searched by random search without replacement with CEILING_EVALS (200) more
configs than each list, which is every config of the spaces up to that size and the best of 200
random draws of larger ones (the row's kernels say each space's valid size, `widened`). Op
cce_linear_cross_entropy (not in the default list) also reports its results' error against float32
torch (`error_vs_fp32`).
Results: one JSON line per run in DIR/library_bench.jsonl (`agent`: the DR_KERNEL_AGENT folder the
run used, or "shipped"), a table at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time

TOKENS, HIDDEN, VOCAB = 8192, 4096, 32000
CEILING_EVALS = int(os.environ.get("CEILING_EVALS", "200"))
FORWARD_ONLY = object()  # An op of an inference library: no backward.
SETTLE_LIMIT_S = 120.0  # Mode defer: steps after the first call until no tuning is pending, at most this long,
STUCK_S = 20.0  # or until the pending tunings have not changed for this long.


def make_op(name: str):
    """Returns step() for one op: one forward and backward on fresh-enough inputs (GemLite's: one
    forward)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev, bf16 = "cuda", torch.bfloat16

    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, device=dev, dtype=bf16) * scale).requires_grad_(True)

    if name.startswith("gems_"):
        import flag_gems

        context = flag_gems.use_gems
    else:
        import contextlib

        context = contextlib.nullcontext
    check = None
    x, dy = leaf(TOKENS, HIDDEN), torch.randn(TOKENS, HIDDEN, device=dev, dtype=bf16)
    w, b = leaf(HIDDEN), leaf(HIDDEN)
    if name == "gems_layer_norm":
        def f():
            return F.layer_norm(x, (HIDDEN,), w, b), dy
    elif name == "gems_rms_norm":
        def f():
            return F.rms_norm(x, (HIDDEN,), w, 1e-6), dy
    elif name == "gems_softmax":
        logits = leaf(TOKENS, VOCAB)
        g = torch.randn(TOKENS, VOCAB, device=dev, dtype=bf16)

        def f():
            return torch.softmax(logits, -1), g
    elif name == "gems_cross_entropy":
        logits = leaf(TOKENS, VOCAB)
        target = torch.randint(0, VOCAB, (TOKENS,), device=dev)

        def f():
            return F.cross_entropy(logits, target), None
    elif name in ("fla_rms_norm", "fla_layer_norm"):
        from fla.modules.norm.layernorm import layer_norm, rms_norm

        def f():
            return (rms_norm(x, w, None, eps=1e-6) if name == "fla_rms_norm" else layer_norm(x, w, b)), dy
    elif name == "fla_norm_gated":
        from fla.modules.norm.fused_norm_gate import rms_norm_gated

        gate = leaf(TOKENS, HIDDEN)

        def f():
            return rms_norm_gated(x, gate, w, None), dy
    elif name == "liger_dyt":
        from liger_kernel.ops.dyt import LigerDyTFunction

        alpha = torch.tensor([0.5], device=dev, dtype=bf16, requires_grad=True)

        def f():
            return LigerDyTFunction.apply(x, alpha, w, b), dy
    elif name == "liger_mlp":
        from liger_kernel.ops.mlp import LigerMLPFunction

        inter = 11008
        xm = leaf(1, TOKENS, HIDDEN)
        gate_w, up_w, down_w = leaf(inter, HIDDEN, scale=0.02), leaf(inter, HIDDEN, scale=0.02), \
            leaf(HIDDEN, inter, scale=0.02)
        g = torch.randn(1, TOKENS, HIDDEN, device=dev, dtype=bf16)

        def f():
            return LigerMLPFunction.apply(xm, gate_w, up_w, down_w), g
    elif name == "ao_int8_linear":
        # torchao's INT8 mixed-precision training (its README's recipe for faster LLM training): a
        # linear layer whose forward, input gradient and weight gradient each quantise rowwise and
        # run one autotuned INT8 GEMM (27 configs, three keys).
        from torchao.prototype.quantized_training.int8_mixed_precision import (
            Int8MixedPrecisionTrainingConfig,
            Int8MixedPrecisionTrainingLinear,
        )

        layer = Int8MixedPrecisionTrainingLinear(HIDDEN, HIDDEN, bias=False, device=dev, dtype=bf16,
                                                 config=Int8MixedPrecisionTrainingConfig())

        def f():
            return layer(x), dy
    elif name in ("ao_fp8_blockwise_linear", "ao_fp8_blockwise_linear_triton"):
        # torchao's DeepSeek-style blockwise FP8 training linear: activations quantised in 1×128
        # blocks and weights in 128×128 by autotuned Triton kernels (45 and 4 configs), the GEMMs by
        # torch._scaled_mm (the module's default) or by torchao's autotuned Triton GEMMs (6 configs).
        from torchao.prototype.blockwise_fp8_training.linear import Float8BlockwiseLinear

        layer = Float8BlockwiseLinear(HIDDEN, HIDDEN, bias=False, device=dev,
                                      use_triton=name.endswith("_triton"))
        with torch.no_grad():
            layer.weight.copy_(torch.randn(HIDDEN, HIDDEN, device=dev) * 0.02)

        def f():
            return layer(x), dy
    elif name == "cce_linear_cross_entropy":
        # Apple's Cut Cross-Entropy: the loss of an LM head over a large vocabulary (Llama 3's) without
        # materialising the logits. Its three kernels are autotuned when CCE_AUTOTUNE=1 (set before
        # its import), each as libraries rarely write it: prune_configs_by with early_config_prune, a
        # perf_model and top_k, restore_value, and reset_to_zero into gradients that programs add to
        # atomically and under locks; the backward also skips blocks whose softmax is negligible.
        os.environ["CCE_AUTOTUNE"] = "1"
        from cut_cross_entropy import linear_cross_entropy

        vocab = 128256
        e, head = leaf(TOKENS, HIDDEN), leaf(vocab, HIDDEN, scale=0.02)
        target = torch.randint(0, vocab, (TOKENS,), device=dev)

        def f():
            return linear_cross_entropy(e, head, target), None

        def check() -> dict:
            """The loss and both gradients of one fresh step against float32 torch: how far the
            tuned kernels' results are from exact, relative to the largest reference value."""
            e.grad = head.grad = None
            loss = linear_cross_entropy(e, head, target)
            loss.backward()
            got = (loss.float(), e.grad.float(), head.grad.float())
            e32, head32 = e.detach().float().requires_grad_(True), head.detach().float().requires_grad_(True)
            ref = F.cross_entropy(e32 @ head32.T, target)
            ref.backward()
            return {k: float((g - r).abs().max() / r.abs().max()) for k, g, r in
                    zip(("loss", "dE", "dC"), got, (ref.detach(), e32.grad, head32.grad), strict=True)}
    elif name in ("gemlite_a16w4_prefill", "gemlite_a16w4_decode"):
        # GemLite (Mobius Labs; the low-bit GEMMs behind HQQ in vLLM and SGLang): a 4096x4096 linear
        # layer with 4-bit weights in groups of 128 (HQQ's format: (W_q - zeros) * scales), bf16
        # activations, its forward only (an inference library): 8192 tokens of a prefill (its GEMM
        # kernels) or one of a decode (its GEMV kernels). Its lists ("fast", the default) are pruned
        # per shape by early_config_prune. It ships tuned configs for some GPUs (the H100 among them,
        # not the H200) that its pruner returns alone for the shapes they cover: set aside here, as
        # on every GPU it has none for, so that the kernels are tuned on every card.
        import gemlite
        from gemlite import DType, GemLiteLinear

        gemlite.reset_config()

        group, tokens = 128, TOKENS if name.endswith("prefill") else 1
        layer = GemLiteLinear(4, group_size=group, in_features=HIDDEN, out_features=HIDDEN,
                              input_dtype=DType.BF16, output_dtype=DType.BF16)
        w_q = torch.randint(0, 16, (HIDDEN, HIDDEN), device=dev, dtype=torch.uint8)
        scales = torch.rand(HIDDEN, HIDDEN // group, device=dev, dtype=bf16) * 0.01 + 0.001
        zeros = torch.full((HIDDEN, HIDDEN // group), 7.5, device=dev, dtype=bf16)
        weight = ((w_q.float().view(HIDDEN, -1, group) - zeros.float()[..., None])
                  * scales.float()[..., None]).view(HIDDEN, HIDDEN)  # What the packed weights mean.
        layer.pack(w_q, scales, zeros, None)
        xg = torch.randn(tokens, HIDDEN, device=dev, dtype=bf16)

        def f():
            return layer(xg), FORWARD_ONLY

        def check() -> dict:
            """The output against float32 torch on the dequantised weights."""
            ref = xg.float() @ weight.T
            return {"y": float((layer(xg).float() - ref).abs().max() / ref.abs().max())}
    elif name == "mamba2_ssd":
        # mamba-ssm's Mamba2 chunked scan (SSD), forward and backward, as a Mamba2 layer of the
        # 2.7B model's width calls it: 80 heads of 64 channels (5120 wide), a state of 128 shared by
        # the heads (one group), chunks of 256, softplus on dt with its bias, a skip D; bf16 inputs,
        # A, D and the bias in float32 as the layer keeps them; 2 sequences of 4096 tokens. Its
        # forward and backward launch 14 autotuned kernels (lists of 6 to 11 configs, 110 in all).
        _mamba_without_its_init()
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined, ssd_chunk_scan_combined_ref

        batch, length, heads, head_dim, state, chunk = 2, TOKENS // 2, 80, 64, 128, 256
        xs, dt = leaf(batch, length, heads, head_dim), leaf(batch, length, heads, scale=0.5)
        bs, cs = leaf(batch, length, 1, state), leaf(batch, length, 1, state)
        a_log = torch.log(torch.rand(heads, device=dev) * 15 + 1).requires_grad_(True)
        skip = torch.ones(heads, device=dev, requires_grad=True)
        dt_bias = (torch.rand(heads, device=dev) - 4).requires_grad_(True)
        g = torch.randn(batch, length, heads, head_dim, device=dev, dtype=bf16)

        def f():
            return mamba_chunk_scan_combined(xs, dt, -torch.exp(a_log), bs, cs, chunk, D=skip, dt_bias=dt_bias,
                                             dt_softplus=True), g

        def check() -> dict:
            """The output against mamba-ssm's own reference in torch, in float32."""
            a = -torch.exp(a_log.detach())
            with torch.no_grad():
                y = mamba_chunk_scan_combined(xs, dt, a, bs, cs, chunk, D=skip, dt_bias=dt_bias, dt_softplus=True)
                ref = ssd_chunk_scan_combined_ref(xs.float(), dt.float(), a, bs.float(), cs.float(), chunk,
                                                  D=skip.detach(), dt_bias=dt_bias.detach(), dt_softplus=True)
            return {"y": float((y.float() - ref).abs().max() / ref.abs().max())}
    elif name == "fla_gated_delta_rule":
        # fla's chunked gated delta rule (Gated DeltaNet, the linear-attention layers of Qwen3-Next),
        # forward (a prefill): 2 sequences of 4096 tokens, 16 heads of 128 for q, k and v, a gate
        # (log-decay, float32) and beta per head and token, q and k L2-normalised in the kernels. Most
        # of its autotuned kernels are built by fla's own decorator (fla_cache_autotune, a subclass of
        # Triton's Autotuner), the rest by triton.autotune. Forward only: fla refuses its gated
        # backward on Hopper with Triton 3.4 to 3.7.0 (wrong results, fla's issue 640).
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

        batch, length, heads, dim = 2, TOKENS // 2, 16, 128
        q, k, v = (leaf(batch, length, heads, dim) for _ in range(3))
        beta = torch.rand(batch, length, heads, device=dev, dtype=bf16).requires_grad_(True)
        gate = F.logsigmoid(torch.randn(batch, length, heads, device=dev)).requires_grad_(True)

        def f():
            with torch.no_grad():
                return chunk_gated_delta_rule(q, k, v, g=gate, beta=beta, use_qk_l2norm_in_kernel=True)[0], \
                    FORWARD_ONLY

        def check() -> dict:
            """The output against fla's own step-by-step reference in float32 (first sequence)."""
            with torch.no_grad():
                y = chunk_gated_delta_rule(q, k, v, g=gate, beta=beta, use_qk_l2norm_in_kernel=True)[0][:1]
                qn, kn = (F.normalize(t[:1].float(), dim=-1) for t in (q, k))
                ref, _ = naive_recurrent_gated_delta_rule(qn, kn, v[:1].float(), beta[:1].float(), gate[:1])
            return {"y": float((y.float() - ref).abs().max() / ref.abs().max())}
    else:
        raise SystemExit(f"unknown op {name}")

    def step():
        with context():
            y, grad = f()
            if grad is FORWARD_ONLY:
                return
            if grad is None:
                y.backward()
            else:
                y.backward(grad)

    step.check = check  # An op's own check of its results, or None.
    return step


def _mamba_without_its_init() -> None:
    """Registers the mamba_ssm package without running its __init__, which imports its
    selective-scan CUDA extension (built only with nvcc; the wheel carried is mamba-ssm's
    MAMBA_SKIP_CUDA_BUILD build) and transformers; its Triton ops need neither."""
    import importlib.util
    from types import ModuleType

    if "mamba_ssm" in sys.modules:
        return
    spec = importlib.util.find_spec("mamba_ssm")
    package = ModuleType("mamba_ssm")
    package.__path__, package.__spec__ = list(spec.submodule_search_locations), spec
    sys.modules["mamba_ssm"] = package


def tuned_kernels() -> dict:
    """Every autotuned kernel that chose a config: its winner per key, and for dr_kernel's the
    configs measured and the seconds its tunings took."""
    import gc

    import triton

    out = {}
    for obj in gc.get_objects():
        try:
            autotuner = isinstance(obj, triton.runtime.Autotuner)
        except ReferenceError:  # A weakref.proxy whose object is gone (Cut Cross-Entropy holds some).
            continue
        if autotuner and isinstance(obj.cache, dict) and obj.cache:
            entry = {"winners": {str(k): str(v) for k, v in obj.cache.items()}}
            if hasattr(obj, "evaluations"):
                entry.update(evaluations=obj.evaluations, tuning_s=round(obj.tuning_s, 3),
                             statuses=obj.last_session.statuses() if obj.last_session else None,
                             described=dict(obj.described), notes=obj.notes[:3],
                             split_s=obj.last_session.split_s if obj.last_session else None,
                             phases_s={k: round(v, 3) for k, v in obj.phases_s.items()},
                             worker_s=_worker_phases(obj.compile_phases_s),
                             deferred_s=[round(s, 3) for s in getattr(obj, "deferred_s", [])])
                if obj.widen and obj.listed:
                    from dr_kernel.tuner import config_dict, widened_space

                    entry["widened"] = widened_space([config_dict(c) for c in obj.listed]).count_valid()
            out[obj.base_fn.__name__] = entry
    return out


def _worker_phases(phases: list[dict]) -> dict:
    """The compile workers' seconds by part (compile, launcher, resources): median and max."""
    names = sorted({k for p in phases for k in p})
    return {k: [round(statistics.median(v), 3), round(max(v), 3)]
            for k in names if (v := [p[k] for p in phases if k in p])}


def gpu_time_ms(step, steps: int = 20) -> float:
    """The GPU time of one step: the summed durations of the kernels it runs (CUDA activity of the
    profiler), median over `steps` steps. Unlike the step's wall time it does not move with the
    CPU's launch overhead, which differs between processes by more than the configs do."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    per_step = []
    try:
        for _ in range(steps):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                step()
                torch.cuda.synchronize()
            per_step.append(sum(e.device_time_total for e in prof.events() if e.device_type != DeviceType.CPU) / 1e3)
    except Exception as error:  # noqa: BLE001 -- the wall-time figures stand without it.
        print(f"gpu_time_ms: {type(error).__name__}: {error}", file=sys.stderr)
        return float("nan")
    return statistics.median(per_step)


def pin_first_configs() -> None:
    """The floor: triton.autotune keeps only each list's first config, so that a first call
    compiles one config per kernel and times none. What it costs beyond that is the one-time cost
    of the process (CUDA, imports the op pulls in, the library's other kernels), which no autotuner
    can remove; first call minus floor is what tuning costs."""
    import triton.runtime.autotuner as autotuner

    # At Autotuner's constructor, so that a library's own subclass of it (fla's fla_cache_autotune)
    # is pinned as triton.autotune's kernels are.
    original = autotuner.Autotuner.__init__

    def first_only(self, fn, arg_names, configs, *args, **kwargs):
        original(self, fn, arg_names, list(configs)[:1] if configs else configs, *args, **kwargs)

    autotuner.Autotuner.__init__ = first_only


def warm_process() -> None:
    """--warm: a plain PyTorch forward and backward (no Triton, no library) before the first call,
    as a training step has run other ops before a library's: CUDA's, cuBLAS's and autograd's
    one-time costs are then paid outside the timed call, for every mode alike."""
    import torch
    import torch.nn.functional as F

    a = torch.randn(TOKENS, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(HIDDEN, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = F.layer_norm(F.gelu(F.linear(a, w)), (HIDDEN,)).softmax(-1)
    y.backward(torch.ones_like(y))
    torch.cuda.synchronize()


def step_times(step, n: int = 50) -> list[float]:
    """Milliseconds per step, CUDA events around each (CPU dispatch included where it dominates)."""
    import torch

    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


def child_processes() -> list[int]:
    """The pids of this process's children (compile and measuring workers), from /proc."""
    me, pids = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == me:
                        pids.append(int(entry))
            except (OSError, IndexError):
                pass
    return pids


def child(op: str, mode: str, profile: bool = False, warm: bool = False) -> dict:
    import torch
    from triton import knobs

    compiles = {"hit": 0, "miss": 0}

    def listen(*, cache_hit: bool, **_):  # Compiles in this process: from Triton's disk cache or not.
        compiles["hit" if cache_hit else "miss"] += 1

    knobs.compilation.listener = listen
    if mode == "floor":
        pin_first_configs()
    elif mode != "stock":
        import dr_kernel

        if mode == "ceiling":
            import dr_kernel.tuner

            # Random search proposes one config at a time in a session that measures in its own
            # process; rounds of 16 compile in parallel as the exhaustive strategy's do.
            dr_kernel.tuner.stop_options = lambda stop, strategy: {"batch": 16}
            dr_kernel.install(widen=True, strategy="random", max_evals=CEILING_EVALS)
        else:
            dr_kernel.install(widen=mode == "widen", defer=mode == "defer")
    step = make_op(op)
    if warm:
        warm_process()
    torch.cuda.synchronize()
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    if profiler is not None:
        profiler.disable()
    settling: list[float] = []
    if mode == "defer":
        import dr_kernel

        settle_start = moved = time.perf_counter()
        pending = dr_kernel.pending_tunings()
        # A key the op launched on its first call only is never tuned: stop once nothing has
        # changed for STUCK_S.
        while pending and time.perf_counter() - settle_start < SETTLE_LIMIT_S and time.perf_counter() - moved < STUCK_S:
            t = time.perf_counter()
            step()
            torch.cuda.synchronize()
            settling.append(time.perf_counter() - t)
            if (now := dr_kernel.pending_tunings()) != pending:
                pending, moved = now, time.perf_counter()
        settle = {"settle_s": (moved if pending else time.perf_counter()) - settle_start,
                  "settle_steps": len(settling), "slowest_settle_step_s": max(settling, default=0.0),
                  "pending_left": [f"{name} {key}" for name, key in pending]}
    for _ in range(10):
        step()
    times = step_times(step)
    result = {"op": op, "mode": mode, "warm": warm, "first_s": first, "step_ms": statistics.median(times),
              "step_ms_p20_p80": statistics.quantiles(times, n=5)[::3], "gpu_ms": gpu_time_ms(step),
              "compiles_in_process": compiles, "kernels": tuned_kernels(), "children": len(child_processes())}
    if mode == "defer":  # The settling steps' wall time beyond as many steady steps: the tunings' pauses.
        result.update(settle, pause_s=sum(settling) - len(settling) * result["step_ms"] / 1e3)
    # The step's wall time is mostly Python (FlagGems' dispatch): timed again, for every mode, after
    # dr_kernel's worker processes are stopped (none in stock), to tell their cost from the noise.
    if mode not in ("stock", "floor"):
        from dr_kernel import measure, tuner

        tuner._close_shared_pool()
        measure._stop_parked()
    again = step_times(step)
    result.update({"step_ms_again": statistics.median(again), "children_again": len(child_processes())})
    if step.check is not None:
        result["error_vs_fp32"] = step.check()
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(60)
        result["profile"] = text.getvalue()[-16000:]
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
        result["profile_self"] = text.getvalue()[-8000:]
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats("dr_kernel", 40)
        result["profile_dr"] = text.getvalue()[-10000:]
    if mode not in ("stock", "floor"):
        import dr_kernel

        result["taken_over"] = len(dr_kernel.taken_over())
        result["kept"] = [(name, reason[:1500]) for name, reason in dr_kernel.kept()]
    return result


def _settled(row: dict) -> str:
    if "settle_s" not in row:
        return ""
    return f"settled {row['settle_s']:.2f} s in {row['settle_steps']} steps, pauses {row['pause_s']:.2f} s "


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--ops", default="gems_layer_norm,gems_rms_norm,gems_softmax,gems_cross_entropy,"
                                   "fla_rms_norm,fla_layer_norm,fla_norm_gated,liger_dyt,liger_mlp,ao_int8_linear,"
                                   "ao_fp8_blockwise_linear,ao_fp8_blockwise_linear_triton")
    p.add_argument("--modes", default="stock,dr,widen", help="of floor, stock, dr, defer, widen, ceiling")
    p.add_argument("--timeout", type=float, default=240)
    p.add_argument("--deadline", type=float, default=1e9, help="seconds after which no new run starts")
    p.add_argument("--profile", action="store_true", help="profile each first call (cProfile, in the rows)")
    p.add_argument("--warm", action="store_true",
                   help="run a plain PyTorch forward and backward before each first call (warm_process)")
    p.add_argument("--child", nargs=2, metavar=("OP", "MODE"))
    args = p.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(*args.child, profile=args.profile, warm=args.warm)))
        return 0
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "library_bench.jsonl")
    started = time.time()
    rows = []
    for op in args.ops.split(","):
        for mode in args.modes.split(","):
            if time.time() - started > args.deadline:
                break
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(tmp, "triton"),
                           DR_KERNEL_DB=os.path.join(tmp, "results.db"))
                env.pop("DR_KERNEL_AUTOTUNE", None)
                t0 = time.time()
                try:
                    command = [sys.executable, __file__, "--out", args.out, "--child", op, mode,
                               *(["--warm"] if args.warm else [])]
                    profiled = args.profile and mode not in ("stock", "floor")
                    out = subprocess.run(command + (["--profile"] if profiled else []),
                                         capture_output=True, text=True, env=env, timeout=args.timeout)
                    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
                    lines = out.stderr.splitlines()
                    error = "\n".join([ln for ln in lines if "dr_kernel:" in ln][:3] +
                                      [ln for ln in lines if "Warning" not in ln and "mask" not in ln][-30:])
                    row = json.loads(line[7:]) if line else {"op": op, "mode": mode, "error": error}
                except subprocess.TimeoutExpired:
                    row = {"op": op, "mode": mode, "error": f"timed out after {args.timeout:.0f} s"}
                row["process_s"] = time.time() - t0
                row["agent"] = os.environ.get("DR_KERNEL_AGENT") or "shipped"
            rows.append(row)
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps({k: v for k, v in row.items() if k not in ("kept", "profile", "kernels")})[:400],
                  flush=True)
    print(f"{'op':20} {'mode':6} {'first s':>8} {'step ms':>8} {'again':>8} {'gpu ms':>8} {'taken':>5} {'kept':>4}")
    for r in rows:
        print(f"{r['op']:20} {r['mode']:6} {r.get('first_s', float('nan')):8.2f} {r.get('step_ms', float('nan')):8.3f} "
              f"{r.get('step_ms_again', float('nan')):8.3f} {r.get('gpu_ms', float('nan')):8.3f} "
              f"{r.get('taken_over', ''):>5} {len(r.get('kept', [])) if 'kept' in r else '':>4} "
              f"{_settled(r)}"
              f"{'ERR ' + r['error'][-120:] if 'error' in r else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
