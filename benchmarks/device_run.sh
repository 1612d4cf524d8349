#!/usr/bin/env bash
# One call on the lent H200 (see docs/gpu-notes.md): build the C++ module in place, then run the
# steps named on the command line, each under its own time limit, and pack everything measured
# into $OUT/results.tgz (the device returns at most 8 files), even when a step runs out of time.
#
#   bash benchmarks/device_run.sh bench sweeps-a      # steps: bench, defer, determinism, faults, gluonattn, gluonmm, library, ncu, ncuprobes, ops, opsprofile, optprofile, persistent, profile, retune, retune-bg, tunemany, splitk, streamk, sweeps-a, sweeps-b, sweeps-rows, sweeps-other-gpu, sweeps-other-gpu-more, sweeps-small, sweeps-tma, sweeps-tma2, sweeps-mm-tma, sweeps-mm-small-tma, sweeps-mm-odd, sweeps-thin, workerstart, shipped
#   LIB_MODES=stock,dr LIB_PROFILE=1 bash benchmarks/device_run.sh library
#   LIB_OPS=ao_int8_linear,ao_fp8_blockwise_linear LIB_MODES=floor,stock,dr bash benchmarks/device_run.sh library
#   LIB_AGENT=benchmarks/results/h100-2026-12-05c/agent-b7655e8 LIB_AGENT_MODES=dr bash benchmarks/device_run.sh library
#   BENCH_STOPS=auto,budget BENCH_PROBLEMS=matmul-4096,softmax-4096 bash benchmarks/device_run.sh bench
#   BENCH_ARGS="--in-process --no-autotune" bash benchmarks/device_run.sh bench
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=python
work=/tmp/dr_kernel_run
# A machine lent again keeps /tmp: an earlier call's folders would travel back as this call's.
rm -rf "$work"
mkdir -p "$work/sweeps"
pack() { tar czf "$OUT/results.tgz" --exclude='cache' --exclude='*triton*' -C "$work" . 2>/dev/null; }
trap pack EXIT
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$work/gpu.txt" 2>&1
scripts/device_build .device/prefix > "$work/build.log" 2>&1 || { echo "build failed"; tail -20 "$work/build.log"; exit 1; }
echo "built in $(elapsed) s"

sweep() {  # name kernel shape precision limit_s [space JSON]
  local name=$1 kernel=$2 shape=$3 precision=$4 limit=$5 space=${6:-}
  timeout -k 10 "$limit" python3 -m dr_kernel.cli sweep --kernel "$kernel" --shape "$shape" --precision "$precision" \
    --out "$work/sweeps/$name.jsonl" --timeout 40 --db "$work/sweeps.db" ${space:+--space "$space"} \
    >> "$work/sweeps/$name.log" 2>&1
  echo "sweep $name: rc $? after $(elapsed) s, $(grep -c '"measure"' "$work/sweeps/$name.jsonl" 2>/dev/null) rows"
  pack  # What the call measured comes back even if the device time runs out in the next step.
}
# Matmul as the recorded tables other than 4096^3 have it: without the BLOCK_M = BLOCK_N = 256
# corner, whose compiles run ptxas for minutes. Two sweeps into one file cover the rest.
mm_a='{"BLOCK_M":[16,32,64,128],"BLOCK_N":[32,64,128,256],"BLOCK_K":[32,64,128],"GROUP_M":[1,8],"num_warps":[2,4,8],"num_stages":[2,3,4,5]}'
mm_b='{"BLOCK_M":[256],"BLOCK_N":[32,64,128],"BLOCK_K":[32,64,128],"GROUP_M":[1,8],"num_warps":[2,4,8],"num_stages":[2,3,4,5]}'
matmul_sweep() {  # name shape precision limit_s
  sweep "$1" matmul "$2" "$3" "$4" "$mm_a"
  sweep "$1" matmul "$2" "$3" 40 "$mm_b"
}

gluon_probe() {  # name script limit_s: one problem under GLUON_SMOKE_TIMEOUT, then all under GLUON_TIMEOUT or limit_s
  timeout -k 10 "${GLUON_SMOKE_TIMEOUT:-120}" python3 "benchmarks/$2" --out "$work/$1-smoke" --problems 1 \
    > "$work/$1-smoke.log" 2>&1
  local rc=$?
  echo "$1 smoke: rc $rc after $(elapsed) s"; grep -v Warning "$work/$1-smoke.log" | tail -12
  pack
  [ "$rc" = 0 ] || return 0
  timeout -k 10 "${GLUON_TIMEOUT:-$3}" python3 "benchmarks/$2" --out "$work/$1" > "$work/$1.log" 2>&1
  echo "$1: rc $? after $(elapsed) s"; grep -v Warning "$work/$1.log" | tail -20
  pack
}

for step in "$@"; do
  case $step in
    bench)
      # SIGABRT on overrun: Python's fault handler prints every thread's stack before the process ends.
      PYTHONFAULTHANDLER=1 timeout -s ABRT -k 10 "$(( ${BENCH_DEADLINE:-300} + 60 ))" python3 benchmarks/gpu_bench.py --out "$work/bench" \
        --cache /tmp/dr_kernel_caches --strategy ppo --deadline "${BENCH_DEADLINE:-300}" \
        --stops "${BENCH_STOPS:-auto}" ${BENCH_PROBLEMS:+--problems "$BENCH_PROBLEMS"} ${BENCH_ARGS:-} \
        >> "$work/bench.log" 2>&1
      echo "bench: rc $? after $(elapsed) s"; tail -25 "$work/bench.log"
      pack ;;
    determinism)  # Whether the C++ core decides here as on the development machine (core_determinism.py
      # --compare), and whether the sixth session's bench rows replay here as they do there.
      agent=benchmarks/results/h100-2026-12-05/agent-b828b3a
      python3 benchmarks/core_determinism.py --json "$work/determinism-shipped.json"
      python3 benchmarks/core_determinism.py --agent "$agent" --json "$work/determinism-b828b3a.json"
      python3 benchmarks/session_replay.py benchmarks/results/h200-2026-12-05/bench-auto --agent "$agent" \
        > "$work/determinism-replay.txt" 2>&1
      echo "determinism: after $(elapsed) s"; tail -3 "$work/determinism-replay.txt"
      pack ;;
    library)  # Needs .whl (the libraries' wheels, docs/gpu-notes.md) carried; LIB_* set the runs.
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl > "$work/pip.log" 2>&1 || { echo "wheels failed"; tail -5 "$work/pip.log"; }
      PYTHONPATH=python:/tmp/site timeout -k 10 "${LIB_TIMEOUT:-480}" python3 benchmarks/library_bench.py \
        --out "$work/library" --modes "${LIB_MODES:-stock,dr}" ${LIB_OPS:+--ops "$LIB_OPS"} \
        --deadline "${LIB_DEADLINE:-420}" --timeout "${LIB_CHILD_TIMEOUT:-240}" ${LIB_PROFILE:+--profile} \
        ${LIB_WARM:+--warm} > "$work/library.log" 2>&1
      echo "library: rc $? after $(elapsed) s"; tail -25 "$work/library.log"
      pack
      # LIB_AGENT_MODES with LIB_AGENT=DIR (a kept agent: policy.bin, cost_model.bin[.xz]): the same ops
      # again in these modes under that agent (DR_KERNEL_AGENT), rows appended, marked with the folder.
      if [ -n "${LIB_AGENT:-}" ]; then
        agent=/tmp/agent-$(basename "$LIB_AGENT"); mkdir -p "$agent"; cp "$LIB_AGENT"/policy.bin "$LIB_AGENT"/*.json "$agent"/
        if [ -f "$LIB_AGENT/cost_model.bin.xz" ]; then xz -dc "$LIB_AGENT/cost_model.bin.xz" > "$agent/cost_model.bin"
        else cp "$LIB_AGENT/cost_model.bin" "$agent/"; fi
        DR_KERNEL_AGENT=$agent PYTHONPATH=python:/tmp/site timeout -k 10 "${LIB_TIMEOUT:-480}" python3 \
          benchmarks/library_bench.py --out "$work/library" --modes "${LIB_AGENT_MODES:-dr}" ${LIB_OPS:+--ops "$LIB_OPS"} \
          --deadline "${LIB_DEADLINE:-420}" > "$work/library-agent.log" 2>&1
        echo "library, agent $LIB_AGENT: rc $? after $(elapsed) s"; tail -15 "$work/library-agent.log"
        pack
      fi ;;
    retune)  # A hot key tuned with 1 evaluation, re-tuned with 40 in a run of the program, picked up after.
      mkdir -p "$work/retune"
      DR_KERNEL_DB="$work/retune/run.db" RETUNE_FIRST_EVALS=1 RETUNE_FIRST_STRATEGY=exhaustive PYTHONFAULTHANDLER=1 timeout -s ABRT -k 10 150 python3 benchmarks/retune_gpu.py \
        > "$work/retune/first.json" 2> "$work/retune/first.log"
      echo "retune first run: rc $? after $(elapsed) s: $(tail -c 400 "$work/retune/first.json")"
      timeout -k 10 240 python3 -m dr_kernel.cli retune --top 1 --budget 40 --db "$work/retune/run.db" --json \
        -- python3 benchmarks/retune_gpu.py > "$work/retune/retune.json" 2> "$work/retune/retune.log"
      echo "retune: rc $? after $(elapsed) s: $(tail -c 1500 "$work/retune/retune.json")"
      DR_KERNEL_DB="$work/retune/run.db" PYTHONFAULTHANDLER=1 timeout -s ABRT -k 10 120 python3 benchmarks/retune_gpu.py \
        > "$work/retune/after.json" 2> "$work/retune/after.log"
      echo "retune after: rc $? after $(elapsed) s: $(tail -c 400 "$work/retune/after.json")"
      pack ;;
    retune-bg)  # The background re-tune in a long-running program: nothing timed while busy, the winner swapped in.
      mkdir -p "$work/retune-bg"
      DR_KERNEL_DB="$work/retune-bg/run.db" PYTHONFAULTHANDLER=1 timeout -s ABRT -k 10 330 python3 \
        benchmarks/retune_background_gpu.py > "$work/retune-bg/run.json" 2> "$work/retune-bg/run.log"
      echo "retune-bg: rc $? after $(elapsed) s: $(tail -c 1500 "$work/retune-bg/run.json")"
      pack ;;
    ops)  # Issue 11: dr_kernel.ops against torch on the published problem set (OPS_FAMILIES picks).
      PYTHONFAULTHANDLER=1 timeout -s ABRT -k 10 "$(( ${OPS_DEADLINE:-480} + 90 ))" python3 benchmarks/ops_bench.py \
        --out "$work/ops" --deadline "${OPS_DEADLINE:-480}" --dispatch ${OPS_FAMILIES:+--families "$OPS_FAMILIES"} ${OPS_ARGS:-} \
        > "$work/ops.log" 2>&1
      echo "ops: rc $? after $(elapsed) s"; grep -v Warning "$work/ops.log" | tail -45
      pack ;;
    persistent)  # Issue 11: persistent tile schedules (pointer loads; TMA, C whole or in halves, flattened or
      # not) and the TMA kernel against the built-in matmul and cuBLAS, same tiles; rows kept per problem.
      # PERSISTENT_VARIANTS, PERSISTENT_PROBLEMS and PERSISTENT_TILES narrow it (the probe's --variants, --problems, --tiles).
      timeout -k 10 "${PERSISTENT_TIMEOUT:-420}" python3 benchmarks/persistent_probe.py --out "$work/persistent" \
        ${PERSISTENT_VARIANTS:+--variants "$PERSISTENT_VARIANTS"} ${PERSISTENT_PROBLEMS:+--problems "$PERSISTENT_PROBLEMS"} \
        ${PERSISTENT_TILES:+--tiles "$PERSISTENT_TILES"} > "$work/persistent.log" 2>&1
      echo "persistent: rc $? after $(elapsed) s"; grep -v Warning "$work/persistent.log" | tail -40
      pack ;;
    streamk)  # Issue 11: the stream-K probe (benchmarks/streamk_probe.py) against the built-in, persistent TMA
      # kernel and cuBLAS on the two shapes below 0.8x and their neighbours; rows kept per problem.
      timeout -k 10 "${STREAMK_TIMEOUT:-300}" python3 benchmarks/streamk_probe.py --out "$work/streamk" \
        ${STREAMK_PROBLEMS:+--problems "$STREAMK_PROBLEMS"} > "$work/streamk.log" 2>&1
      echo "streamk: rc $? after $(elapsed) s"; grep -v Warning "$work/streamk.log" | grep -E '"best_ms"|Error|error' | tail -40
      pack ;;
    gluonattn)  # Issue 11: attention's warp-specialised Gluon configs (TMA 3 and 4) against SDPA and the TMA kernel.
      # A pipeline that deadlocks hangs its launch (the log names the config launched last): one
      # problem first under a short limit, the rest only if it ran. On an H100 the whole step
      # took 196 s with cold caches (8 configs a problem then, 12 now) and 68 s with warm ones.
      gluon_probe gluonattn gluon_attention_probe.py 420 ;;
    gluonmm)  # Issue 11: the persistent warp-specialised Gluon GEMM against cuBLAS and the built-in matmul.
      gluon_probe gluonmm gluon_matmul_probe.py 300 ;;
    opsprofile)  # Where a dr_kernel.ops call's host time goes.
      timeout -k 10 200 python3 benchmarks/ops_dispatch_profile.py --out "$work/opsprofile" > "$work/opsprofile.log" 2>&1
      echo "opsprofile: rc $? after $(elapsed) s"; grep -v Warning "$work/opsprofile.log" | head -60
      pack ;;
    optprofile)  # Issue 12: @optimize(profile=True): a kernel of __main__ tuned, then its winner's counters.
      timeout -k 10 240 python3 benchmarks/optimize_profile_gpu.py > "$work/optprofile.json" 2> "$work/optprofile.log"
      echo "optprofile: rc $? after $(elapsed) s: $(tail -c 2500 "$work/optprofile.json")"; tail -5 "$work/optprofile.log"
      pack ;;
    shipped)  # Issue 12: a kernel of __main__ measured in a measuring process, sent as its source.
      timeout -k 10 240 python3 benchmarks/shipped_gpu.py > "$work/shipped.json" 2> "$work/shipped.log"
      echo "shipped: rc $? after $(elapsed) s: $(tail -c 1500 "$work/shipped.json")"; tail -5 "$work/shipped.log"
      pack ;;
    workerstart)  # Issue 10: where a measuring process's start goes.
      timeout -k 10 240 python3 benchmarks/worker_start_probe.py --out "$work/worker_start.json" > "$work/worker_start.log" 2>&1
      echo "workerstart: rc $? after $(elapsed) s"; tail -c 3000 "$work/worker_start.log"
      pack ;;
    defer)  # Deferred tuning end to end: a space's kernel, a list's, and outputs that already hold the result.
      DR_KERNEL_DB="$work/defer.db" PYTHONFAULTHANDLER=1 timeout -s ABRT -k 10 300 python3 benchmarks/defer_gpu.py \
        > "$work/defer.json" 2> "$work/defer.log"
      echo "defer: rc $? after $(elapsed) s"; cat "$work/defer.json"; tail -3 "$work/defer.log" ;;
    faults)  # Issue 9: an illegal address, a hung kernel and NaN in one tuning; then a second process.
      mkdir -p "$work/faults"
      for run in 1 2; do
        DR_KERNEL_DB="$work/faults/faults.db" PYTHONFAULTHANDLER=1 timeout -s ABRT -k 10 150 python3 benchmarks/gpu_faults.py \
          > "$work/faults/run$run.json" 2> "$work/faults/run$run.log"
        echo "faults run $run: rc $? after $(elapsed) s: $(tail -c 900 "$work/faults/run$run.json")"; tail -3 "$work/faults/run$run.log"
      done
      pack ;;
    ncu)  # Issue 12: Nsight Compute counters of the four first built-in kernels, raw reports kept.
      timeout -k 10 300 python3 benchmarks/ncu_builtins.py --out "$work/ncu" > "$work/ncu.log" 2>&1
      echo "ncu: rc $? after $(elapsed) s"; tail -c 3000 "$work/ncu.log"
      pack ;;
    ncuprobes)  # Issue 12: counters of every recorded problem's probe configs, one ncu process a batch.
      timeout -k 10 "${PROBES_TIMEOUT:-540}" python3 benchmarks/ncu_probes.py --out "$work/ncu-probes" \
        --deadline "${PROBES_DEADLINE:-480}" ${PROBES_TABLES:+--tables $PROBES_TABLES} > "$work/ncu-probes.log" 2>&1
      echo "ncuprobes: rc $? after $(elapsed) s"; grep -v '^{' "$work/ncu-probes.log" | tail -c 3000
      pack ;;
    profile)  # Issue 12: `dr-kernel evaluate --profile` on the four first built-in kernels' best recorded configs.
      mkdir -p "$work/profile"
      for spec in 'matmul|{"BLOCK_M":128,"BLOCK_N":256,"BLOCK_K":64,"GROUP_M":8,"num_warps":8,"num_stages":3}' \
                  'softmax|{"BLOCK":4096,"num_warps":8,"num_stages":1}' \
                  'attention|{"BLOCK_M":128,"BLOCK_N":64,"num_warps":8,"num_stages":3}' \
                  'rmsnorm|{"BLOCK":4096,"num_warps":8,"num_stages":1}'; do
        k=${spec%%|*}
        timeout -k 10 120 python3 -m dr_kernel.cli evaluate --kernel "$k" --config "${spec#*|}" --profile \
          > "$work/profile/$k.txt" 2>&1
        echo "profile $k: rc $? after $(elapsed) s"; cat "$work/profile/$k.txt"
      done
      pack ;;
    tunemany)  # Issue 13: a transformer block's kernels collected, tuned with tune-many, step time before/after.
      PYTHONFAULTHANDLER=1 timeout -s ABRT -k 10 "${TM_TIMEOUT:-420}" python3 benchmarks/tune_many_gpu.py --out "$work/tune-many" \
        ${TM_ARGS:-} > "$work/tune-many.log" 2>&1
      echo "tune-many: rc $? after $(elapsed) s"; tail -c 2500 "$work/tune-many.log"; tail -c 2500 "$work/tune-many/tune_many_gpu.json"
      pack ;;
    splitk)  # SPLIT_K as a tuning axis on the deep-K and mid-size shapes, over a narrowed tile space.
      sk='{"BLOCK_M":[64,128],"BLOCK_N":[64,128],"BLOCK_K":[32,64,128],"GROUP_M":[8],"num_warps":[4,8],"num_stages":[3,4],"SPLIT_K":[1,2,4,8,16]}'
      sweep matmul_splitk_512x512x32768_fp16 matmul M=512,N=512,K=32768 fp16 110 "$sk"
      sweep matmul_splitk_4096x4096x4096_fp16 matmul M=4096,N=4096,K=4096 fp16 110 "$sk"
      sweep matmul_splitk_2048x1000x16384_bf16 matmul M=2048,N=1000,K=16384 bf16 110 "$sk" ;;
    sweeps-a)
      sweep softmax_8192x1024_fp16 softmax rows=8192,cols=1024 fp16 60
      sweep softmax_2048x16384_fp16 softmax rows=2048,cols=16384 fp16 60
      sweep softmax_4096x4096_bf16 softmax rows=4096,cols=4096 bf16 60
      sweep rmsnorm_4096x4096_fp16 rmsnorm rows=4096,cols=4096 fp16 60
      sweep rmsnorm_16384x8192_bf16 rmsnorm rows=16384,cols=8192 bf16 60 ;;
    sweeps-rows)  # Few rows, wide: an LM head's softmax (the tables' softmax shapes have 1,024-8,192 rows).
      sweep softmax_512x32000_fp16 softmax rows=512,cols=32000 fp16 60
      sweep softmax_1024x128256_bf16 softmax rows=1024,cols=128256 bf16 60 ;;
    sweeps-tma)  # Issue 11: the TMA attention kernel against the recorded one, same tiles, and SDPA.
      at='{"BLOCK_M":[64,128],"BLOCK_N":[32,64,128],"num_warps":[4,8],"num_stages":[2,3,4],"TMA":[0,1]}'
      sweep attention_2x16x8192x128_bf16_tma attention Z=2,H=16,N_CTX=8192,HEAD_DIM=128,CAUSAL=false bf16 90 "$at"
      sweep attention_1x8x16384x128_causal_bf16_tma attention Z=1,H=8,N_CTX=16384,HEAD_DIM=128,CAUSAL=true bf16 90 "$at"
      sweep attention_4x32x4096x64_causal_bf16_tma attention Z=4,H=32,N_CTX=4096,HEAD_DIM=64,CAUSAL=true bf16 90 "$at"
      sweep attention_8x16x1024x64_fp16_tma attention Z=8,H=16,N_CTX=1024,HEAD_DIM=64,CAUSAL=false fp16 90 "$at"
      sweep attention_4x8x4097x64_fp16_tma attention Z=4,H=8,N_CTX=4097,HEAD_DIM=64,CAUSAL=false fp16 90 "$at" ;;
    sweeps-tma2)  # Issue 11: the TMA attention kernel REFINED (TMA = 2: heavy causal tiles first, the scale
      # fused into the exponent) against it as measured (TMA = 1), same tiles, three problems (88 s on an H100).
      at='{"BLOCK_M":[64,128],"BLOCK_N":[32,64,128],"num_warps":[4,8],"num_stages":[2,3,4],"TMA":[1,2]}'
      sweep attention_1x8x16384x128_causal_bf16_tma2 attention Z=1,H=8,N_CTX=16384,HEAD_DIM=128,CAUSAL=true bf16 100 "$at"
      sweep attention_4x32x4096x64_causal_bf16_tma2 attention Z=4,H=32,N_CTX=4096,HEAD_DIM=64,CAUSAL=true bf16 100 "$at"
      sweep attention_2x16x8192x128_bf16_tma2 attention Z=2,H=16,N_CTX=8192,HEAD_DIM=128,CAUSAL=false bf16 100 "$at" ;;
    sweeps-mm-tma)  # Issue 11: the TMA matmul kernel against the recorded one, same tiles (48 each).
      mt='{"BLOCK_M":[64,128],"BLOCK_N":[64,128,256],"BLOCK_K":[64],"GROUP_M":[8],"num_warps":[4,8],"num_stages":[3,4],"TMA":[0,1]}'
      sweep matmul_4096x4096x4096_fp16_tma matmul M=4096,N=4096,K=4096 fp16 80 "$mt"
      sweep matmul_8192x8192x4096_bf16_tma matmul M=8192,N=8192,K=4096 bf16 80 "$mt"
      sweep matmul_8192x4096x14336_bf16_tma matmul M=8192,N=4096,K=14336 bf16 80 "$mt" ;;
    sweeps-mm-small-tma)  # Issue 11: the TMA matmul kernel (one program per tile) against the pointer kernels on the
      # shapes where Triton stays below cuBLAS (small, skinny, short K: one wave of tiles or less),
      # which sweeps-mm-tma (three large problems) did not cover.
      mt='{"BLOCK_M":[64,128],"BLOCK_N":[64,128,256],"BLOCK_K":[64,128],"GROUP_M":[8],"num_warps":[4,8],"num_stages":[3,4,5],"TMA":[0,1]}'
      sweep matmul_1000x1000x1000_fp16_tma matmul M=1000,N=1000,K=1000 fp16 100 "$mt"
      sweep matmul_3000x5000x1000_fp16_tma matmul M=3000,N=5000,K=1000 fp16 100 "$mt"
      sweep matmul_4096x128x4096_bf16_tma matmul M=4096,N=128,K=4096 bf16 100 "$mt"
      sweep matmul_128x4096x4096_fp16_tma matmul M=128,N=4096,K=4096 fp16 100 "$mt" ;;
    sweeps-thin)  # New problems of the families whose problems the leave-one-problem-out replay fails on
      # (issue 8: rmsnorm, causal attention, small-M FP8, layernorm_bwd): each has one or two other tables
      # to learn from (benchmarks/agent.md); about 300 s on an H100.
      sweep fp8_matmul_128x8192x4096_fp16 fp8_matmul M=128,N=8192,K=4096 fp16 60
      sweep fp8_matmul_33x14336x4096_bf16 fp8_matmul M=33,N=14336,K=4096 bf16 60
      sweep rmsnorm_8192x5120_bf16 rmsnorm rows=8192,cols=5120 bf16 50
      sweep rmsnorm_2048x12288_fp16 rmsnorm rows=2048,cols=12288 fp16 50
      sweep rmsnorm_1001x7168_bf16 rmsnorm rows=1001,cols=7168 bf16 50
      sweep layernorm_bwd_4096x8192_fp16 layernorm_bwd rows=4096,cols=8192 fp16 40
      sweep layernorm_bwd_1001x3072_bf16 layernorm_bwd rows=1001,cols=3072 bf16 40
      sweep attention_1x16x2048x128_causal_bf16 attention Z=1,H=16,N_CTX=2048,HEAD_DIM=128,CAUSAL=true bf16 80
      sweep attention_4x16x4096x128_causal_fp16 attention Z=4,H=16,N_CTX=4096,HEAD_DIM=128,CAUSAL=true fp16 80
      sweep attention_2x16x4096x128_bf16 attention Z=2,H=16,N_CTX=4096,HEAD_DIM=128,CAUSAL=false bf16 80 ;;
    sweeps-mm-odd)  # Issue 11's two matmul shapes below 0.8x cuBLAS, each space recorded whole: the persistent
      # TMA kernel's tiles (TMA = 2, PERSISTENT_RULE) on 3000x5000x1000, which a live tuning searched in 13
      # evaluations; and on 1000^3 (under two waves: no persistent kernel) the pointer kernel's middle tiles
      # with and without a split of K. Each sweep's reference row is torch's (cuBLAS) time.
      pt='{"BLOCK_M":[64,128,256],"BLOCK_N":[64,128,256],"BLOCK_K":[32,64,128],"GROUP_M":[1,8],"num_warps":[4,8],"num_stages":[2,3,4,5],"TMA":[2]}'
      sw='{"BLOCK_M":[32,64,128],"BLOCK_N":[64,128],"BLOCK_K":[64,128],"GROUP_M":[8],"num_warps":[4,8],"num_stages":[2,3,4,5],"SPLIT_K":[1,2]}'
      sweep matmul_3000x5000x1000_fp16_persistent matmul M=3000,N=5000,K=1000 fp16 "${ODD_LIMIT:-200}" "$pt"
      sweep matmul_1000x1000x1000_fp16_split matmul M=1000,N=1000,K=1000 fp16 "${ODD_LIMIT:-200}" "$sw" ;;
    sweeps-small)  # The shared matmul.jsonl's two problems of 10-19 us, whose top configs its timing could not
      # rank (p80/p20 of 1.6 and 1.25 over their top 30; benchmarks/agent.md, "Two tables that cannot rank
      # their best"), again with the project's timer; their rows then replace those of matmul.jsonl.
      matmul_sweep matmul_1024x1024x1024_fp16 M=1024,N=1024,K=1024 fp16 130
      matmul_sweep matmul_16x4096x4096_fp16 M=16,N=4096,K=4096 fp16 130 ;;
    sweeps-other-gpu)  # Problems the H200 tables hold, recorded on the GPU lent (an H100 lately): what a prior
      # learned on one GPU is worth on another (benchmarks/agent.md, "Tables from another GPU").
      sweep attention_2x16x2048x128_causal_fp16 attention Z=2,H=16,N_CTX=2048,HEAD_DIM=128,CAUSAL=true fp16 90
      sweep attention_8x16x1024x64_bf16 attention Z=8,H=16,N_CTX=1024,HEAD_DIM=64,CAUSAL=false bf16 80
      sweep softmax_4096x4096_bf16 softmax rows=4096,cols=4096 bf16 60
      sweep softmax_512x32000_fp16 softmax rows=512,cols=32000 fp16 80
      sweep rmsnorm_4096x4096_fp16 rmsnorm rows=4096,cols=4096 fp16 60
      sweep rmsnorm_16384x8192_bf16 rmsnorm rows=16384,cols=8192 bf16 60 ;;
    sweeps-other-gpu-more)  # Seven more of them, first the four families without an analytic estimate (251 s on an H100).
      sweep layernorm_3001x5120_bf16 layernorm rows=3001,cols=5120 bf16 60
      sweep cross_entropy_8192x32000_fp16 cross_entropy tokens=8192,vocab=32000 fp16 60
      sweep cumsum_8192x4096_bf16 cumsum rows=8192,cols=4096 bf16 50
      sweep grouped_matmul_8x8192x4096x2048_bf16 grouped_matmul G=8,M=8192,N=4096,K=2048 bf16 90
      sweep softmax_8192x1024_fp16 softmax rows=8192,cols=1024 fp16 50
      sweep attention_4x32x4096x64_fp16 attention Z=4,H=32,N_CTX=4096,HEAD_DIM=64,CAUSAL=false fp16 80
      sweep softmax_1024x128256_bf16 softmax rows=1024,cols=128256 bf16 80 ;;
    sweeps-b)
      sweep attention_2x16x2048x128_causal_fp16 attention Z=2,H=16,N_CTX=2048,HEAD_DIM=128,CAUSAL=true fp16 70
      sweep attention_1x32x16384x64_fp16 attention Z=1,H=32,N_CTX=16384,HEAD_DIM=64,CAUSAL=false fp16 70
      sweep attention_8x16x1024x64_bf16 attention Z=8,H=16,N_CTX=1024,HEAD_DIM=64,CAUSAL=false bf16 70
      matmul_sweep matmul_64x4095x8192_fp16 M=64,N=4095,K=8192 fp16 130
      matmul_sweep matmul_2048x1000x16384_bf16 M=2048,N=1000,K=16384 bf16 130 ;;
  esac
done
echo "done after $(elapsed) s"
