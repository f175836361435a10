#!/usr/bin/env bash
# bench/attention.sh — `weft bench throughput` (flash attention as weft
# chooses it, or as FA says) against llama-batched-bench with flash attention
# on and off, row by row, the engines alternating (A B C, C B A, ...), and a
# Markdown table of medians on stdout. Each weft run is its own process with
# n_seq_max = that row's B, so FlashAttention::automatic probes that shape.
#
# Settings (environment): REPS=3 THREADS=2 PP=128 TG=32 PARALLEL=1,4,16,64
# CTX=8192 (raised to fit B*(PP+TG) where a row needs more) BATCH=2048 UBATCH=512 FA=auto (weft's --flash-attn)
# BUILD=build/release OUT=$BUILD/bench-attention. Needs the llama-tools target
# built (cmake --build build/release --target llama-tools) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-3}
THREADS=${THREADS:-2}
PP=${PP:-128}
TG=${TG:-32}
PARALLEL=${PARALLEL:-1,4,16,64}
CTX=${CTX:-8192}
BATCH=${BATCH:-2048}
UBATCH=${UBATCH:-512}
FA=${FA:-auto}
BUILD=${BUILD:-build/release}
OUT=${OUT:-$BUILD/bench-attention}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}

die() { echo "bench/attention.sh: $*" >&2; exit 1; }
base=$(sed -n 's/^WEFT_LLAMA_BUILD_BASE:INTERNAL=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
[[ -n "$base" ]] || die "$BUILD is not configured (cmake --preset release)"
bb="$base/tools/bin/llama-batched-bench"
weft="$BUILD/tools/weft/weft"
[[ -x "$weft" ]] || die "missing $weft: cmake --build $BUILD --target weft-cli"
[[ -x "$bb" ]] || die "missing $bb: cmake --build $BUILD --target llama-tools"
model="$BUILD/models/small.gguf"
if [[ ! -f "$model" ]]; then
  mkdir -p "$(dirname "$model")"
  "$weft" make-model --preset small --seed 1 --out "$model" -q
fi
rm -rf "$OUT"
mkdir -p "$OUT"

run() {  # name, output file, command...
  local name=$1 out=$2
  shift 2
  printf '%s  load %s  %s\n' "$(date +%T)" "$(cut -d' ' -f1 /proc/loadavg)" "$name" >&2
  cut -d' ' -f1 /proc/loadavg >>"$OUT/load.txt"
  timeout "$RUN_TIMEOUT" "$@" >"$out" 2>"$out.log" || die "$name failed (log: $out.log)"
}

IFS=, read -r -a levels <<<"$PARALLEL"
for rep in $(seq 1 "$REPS"); do
  for b in "${levels[@]}"; do
    need=$((b * (PP + TG)))
    ctx=$((need > CTX ? (need + 1023) / 1024 * 1024 : CTX))
    engines=(weft on off)
    if ((rep % 2 == 0)); then engines=(off on weft); fi
    for e in "${engines[@]}"; do
      if [[ $e == weft ]]; then
        run "B=$b weft --flash-attn $FA (rep $rep)" "$OUT/weft-$b-$rep.txt" \
          "$weft" bench throughput -m "$model" --pp "$PP" --tg "$TG" --parallel "$b" --ctx "$ctx" \
          --batch "$BATCH" --ubatch "$UBATCH" --threads "$THREADS" --flash-attn "$FA" --json "$OUT/weft-$b-$rep.json"
      else
        run "B=$b llama-batched-bench -fa $e (rep $rep)" "$OUT/bb-$e-$b-$rep.jsonl" \
          "$bb" -m "$model" -npp "$PP" -ntg "$TG" -npl "$b" -c "$ctx" -b "$BATCH" -ub "$UBATCH" \
          -t "$THREADS" -tb "$THREADS" -kvu -fa "$e" --output-format jsonl
      fi
    done
  done
done

python3 - "$OUT" "$REPS" "$PARALLEL" "$FA" <<'EOF'
import glob, json, statistics, sys
out, reps, levels, fa = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")], sys.argv[4]
def bb(e, b, r):
    for line in open(f"{out}/bb-{e}-{b}-{r}.jsonl"):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"no row in bb-{e}-{b}-{r}.jsonl")
med = statistics.median
loads = [float(x) for x in open(f"{out}/load.txt")]
print(f"| B | S_PP weft | S_PP fa on | S_PP fa off | PP weft/best | S_TG weft | S_TG fa on | S_TG fa off | TG weft/best | weft's kernel | weft outside llama_decode per generated token |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
# weft/best: weft's median over the better of llama.cpp's two medians; in
# brackets the same per repetition (weft over that repetition's better run:
# the larger of two noisy samples, so biased against weft), min..max.
for b in levels:
    w = [json.load(open(f"{out}/weft-{b}-{r}.json")) for r in range(1, reps + 1)]
    on = [bb("on", b, r) for r in range(1, reps + 1)]
    off = [bb("off", b, r) for r in range(1, reps + 1)]
    wpp, wtg = med([x["rows"][0]["s_pp"] for x in w]), med([x["rows"][0]["s_tg"] for x in w])
    onpp, ontg = med([x["speed_pp"] for x in on]), med([x["speed_tg"] for x in on])
    offpp, offtg = med([x["speed_pp"] for x in off]), med([x["speed_tg"] for x in off])
    # Per repetition, weft against the better llama.cpp setting of that repetition; the median of those.
    rpp_reps = [w[i]["rows"][0]["s_pp"] / max(on[i]["speed_pp"], off[i]["speed_pp"]) for i in range(reps)]
    rtg_reps = [w[i]["rows"][0]["s_tg"] / max(on[i]["speed_tg"], off[i]["speed_tg"]) for i in range(reps)]
    rpp = f"{wpp / max(onpp, offpp):.2f} ({min(rpp_reps):.2f}..{max(rpp_reps):.2f})"
    rtg = f"{wtg / max(ontg, offtg):.2f} ({min(rtg_reps):.2f}..{max(rtg_reps):.2f})"
    over = med([(x["rows"][0]["t_tg"] - x["rows"][0]["decode_s_tg"]) / (b * x["rows"][0]["tg"]) * 1e6 for x in w])
    kernels = sorted({x["flash_attn"] for x in w})
    print(f"| {b} | {wpp:.1f} | {onpp:.1f} | {offpp:.1f} | {rpp} | {wtg:.1f} | {ontg:.1f} | {offtg:.1f} | {rtg} | {'/'.join(kernels)} | {over:.0f} us |")
print(f"\nweft --flash-attn {fa}; medians of {reps}; load average during the runs: min {min(loads):.2f}, median {med(loads):.2f}, max {max(loads):.2f}")
EOF
