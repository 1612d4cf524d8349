#!/usr/bin/env bash
# Records every config of the seven kernel families added for issue 8 (layernorm, layernorm_bwd,
# cross_entropy, swiglu, cumsum, grouped_matmul, fp8_matmul) on one H200 with `dr-kernel sweep`,
# in the recorded-table format of docs/data-format.md.
#
#   OUT=/some/dir bash benchmarks/sweep_families.sh      # on the GPU machine ($OUT is set there)
#   OUT=/tmp/dry DRY_RUN=1 PYTHON=.venv/bin/python bash benchmarks/sweep_families.sh   # on a CPU
#
# Writes at most 8 files into $OUT: one <family>.jsonl per family (reference and measure rows of
# all its problems, appended and flushed row by row, so whatever was measured before a time limit
# survives) and sweep_families.log (build, one line per sweep, the summary at the end).
#
# Time: the problems run in rounds (the first problem of every family, then the second ones, then
# the third), each sweep under `timeout` with the least of what is left of its family's cap and of
# the whole budget: SWEEP_BUDGET_S (default 420 s) from the end of the build, and never past
# SWEEP_DEADLINE_S (default 510 s) from the script's start, so that a build on a fresh machine
# (which it does only when dr_kernel._core does not import) comes out of the sweeps' time. A family
# whose compiles or launches are slower than planned therefore loses its own later problems, not
# another family's. Setting SWEEP_RESUME=<dir with earlier <family>.jsonl files> copies them into
# $OUT first: the sweeps then skip every config already recorded and go on where they stopped.
# SWEEP_ONLY="swiglu cumsum:rows=1001,cols=32000" runs only the sweeps named (a family, or a family
# and its shape as written below), sparing each finished one its start (about 10 s);
# SWEEP_CAPS="swiglu=150 fp8_matmul=120" replaces the per-family caps below.
#
# DRY_RUN=1 runs the same schedule on a CPU: every real problem is described and one config of it
# compiled for the H200 (`dr-kernel evaluate`, static analysis only), then each sweep runs on a
# tiny shape of the same family and precision in Triton's interpreter (2 configs, 2 launches).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder the results go to}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH}
py=${PYTHON:-python3}
dry=${DRY_RUN:-0}
budget=${SWEEP_BUDGET_S:-420}
deadline=${SWEEP_DEADLINE_S:-510}
log="$OUT/sweep_families.log"
say() { echo "$*" | tee -a "$log"; }

if [ -n "${SWEEP_RESUME:-}" ]; then
  cp "$SWEEP_RESUME"/*.jsonl "$OUT"/ 2>/dev/null && say "resuming from the tables in $SWEEP_RESUME"
fi
script_start=$(date +%s)
if ! "$py" -c "import dr_kernel._core" 2>/dev/null; then
  say "building the C++ module (scripts/device_build)"
  scripts/device_build .device/prefix >> "$log" 2>&1 || { say "build failed"; tail -20 "$log"; exit 1; }
fi
[ "$dry" = 1 ] || nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  >> "$log" 2>&1
start=$(date +%s)
(( budget > deadline - (start - script_start) )) && budget=$(( deadline - (start - script_start) ))
say "ready after $((start - script_start)) s; budget ${budget} s for the sweeps"
elapsed() { echo $(( $(date +%s) - start )); }

# Seconds each family may spend over all its problems, from the space sizes: startup of one sweep
# (about 10 s: torch, 15 compile workers, the measuring worker, the framework's timing) per
# problem, plus compiles (0.2-2 s each over 15 workers) and ~60 ms of timing per config.
declare -A cap=([layernorm]=45 [layernorm_bwd]=50 [cross_entropy]=45 [swiglu]=55 [cumsum]=55
                [grouped_matmul]=75 [fp8_matmul]=95)
for kv in ${SWEEP_CAPS:-}; do cap[${kv%%=*}]=${kv#*=}; done
declare -A used=()
# Tiny shapes for the dry run, one per family.
declare -A tiny=([layernorm]=rows=5,cols=300 [layernorm_bwd]=rows=7,cols=100 [cross_entropy]=tokens=9,vocab=1000
                 [swiglu]=tokens=7,ffn=300 [cumsum]=rows=5,cols=700 [grouped_matmul]=G=3,M=70,N=40,K=48
                 [fp8_matmul]=M=40,N=72,K=96)

sweep() {  # family shape precision
  local family=$1 shape=$2 precision=$3
  if [ -n "${SWEEP_ONLY:-}" ] && [[ " $SWEEP_ONLY " != *" $family "* && " $SWEEP_ONLY " != *" $family:$shape "* ]]; then
    return
  fi
  local left_family=$(( ${cap[$family]} - ${used[$family]:-0} )) left_all=$(( budget - $(elapsed) ))
  local limit=$(( left_family < left_all ? left_family : left_all ))
  if [ "$limit" -lt 12 ]; then
    say "skip $family $shape $precision: ${limit} s left (family cap ${cap[$family]} s, budget ${budget} s)"
    return
  fi
  local t0 rc extra=()
  t0=$(date +%s)
  if [ "$dry" = 1 ]; then
    # The real problem is checked statically (its shape parses, a config compiles for the H200)...
    "$py" -m dr_kernel.cli evaluate --kernel "$family" --shape "$shape" --precision "$precision" \
      --config "$("$py" -c "from dr_kernel.kernels import get; import json; print(json.dumps(next(get('$family').configs())))")" \
      --json > "$OUT/.evaluate.json" 2>> "$log"
    rc=$?
    local verdict="failed (the lines above say why)"
    [ "$rc" = 0 ] && verdict=$("$py" -c "import json; r = json.load(open('$OUT/.evaluate.json')); print('valid' if r['valid'] else r['reason'])")
    say "evaluate $family $shape $precision: $verdict"
    rm -f "$OUT/.evaluate.json"
    # ...and the sweep itself runs on a tiny shape in the interpreter. TRITON_INTERPRET is set for
    # the whole command: the measuring worker imports Triton before it would set it itself.
    shape=${tiny[$family]}
    extra=(--interpret --limit 2 --reps 2 --workers 1)
    # The interpreter multiplies bf16 tl.dot operands wrongly (tests/test_kernels.py says how);
    # the grouped GEMM's dry run therefore uses fp16. The fp8 GEMM's operands are e4m3 either way.
    [ "$family" = grouped_matmul ] && precision=fp16
    export TRITON_INTERPRET=1
  fi
  timeout -k 20 "$limit" "$py" -m dr_kernel.cli sweep --kernel "$family" --shape "$shape" --precision "$precision" \
    --out "$OUT/$family.jsonl" --timeout 40 --db "${TMPDIR:-/tmp}/dr_kernel_sweep_families.db" "${extra[@]}" \
    >> "$log" 2>&1
  rc=$?
  unset TRITON_INTERPRET
  used[$family]=$(( ${used[$family]:-0} + $(date +%s) - t0 ))
  local how="rc $rc"
  [ "$rc" = 124 ] && how="cut at its limit of ${limit} s"
  say "sweep $family $shape $precision: $how, $(( $(date +%s) - t0 )) s; at $(elapsed) s"
}

# Round 1: the first problem of every family; rounds 2 and 3: the others. Both precisions appear
# in every family; odd sizes in every family.
sweep layernorm      rows=8192,cols=4096            fp16
sweep layernorm_bwd  rows=8192,cols=4096            bf16
sweep cross_entropy  tokens=8192,vocab=32000        fp16
sweep swiglu         tokens=8192,ffn=14336          bf16
sweep cumsum         rows=256,cols=128256           fp16
sweep grouped_matmul G=8,M=8192,N=4096,K=2048       bf16
sweep fp8_matmul     M=8192,N=4096,K=4096           bf16

sweep layernorm      rows=3001,cols=5120            bf16
sweep layernorm_bwd  rows=3001,cols=5120            fp16
sweep cross_entropy  tokens=4096,vocab=128256       bf16
sweep swiglu         tokens=2999,ffn=8960           fp16
sweep cumsum         rows=8192,cols=4096            bf16
sweep grouped_matmul G=64,M=16384,N=1408,K=2048     fp16
sweep fp8_matmul     M=61,N=8192,K=8192             fp16

sweep layernorm      rows=2048,cols=12288           bf16
sweep layernorm_bwd  rows=16384,cols=2048           bf16
sweep cross_entropy  tokens=2047,vocab=50257        bf16
sweep swiglu         tokens=4096,ffn=11008          fp16
sweep cumsum         rows=1001,cols=32000           fp16
sweep grouped_matmul G=6,M=3001,N=1000,K=1024       bf16
sweep fp8_matmul     M=4096,N=14336,K=4096          bf16

# One line per problem: rows recorded, by status, and the best time against the framework's.
"$py" - "$OUT" >> "$log" 2>&1 <<'EOF'
import collections, json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.jsonl")):
    problems = collections.defaultdict(lambda: {"ref": None, "statuses": collections.Counter(), "best": None})
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        p = problems[(json.dumps(row["shape"]), row.get("dtype", "fp16"))]
        if row["type"] == "reference":
            p["ref"] = row["ms"]
        elif row["type"] == "measure":  # Not the space row, which has no status.
            p["statuses"][row["status"]] += 1
            if row["status"] == "ok" and (p["best"] is None or row["ms"] < p["best"]):
                p["best"] = row["ms"]
    for (shape, dtype), p in problems.items():
        speedup = f"{p['ref'] / p['best']:.2f}x the framework" if p["ref"] and p["best"] else "-"
        print(f"{path.stem} {shape} {dtype}: {sum(p['statuses'].values())} rows {dict(p['statuses'])}; "
              f"best {p['best']} ms, {speedup}")
EOF
say "done after $(elapsed) s of sweeps ($(( $(date +%s) - script_start )) s in all)"
tail -25 "$log"
