#!/usr/bin/env bash
# bench/compare.sh — weft side by side with llama.cpp's own tools, on the same
# machine, model and settings, in one run: builds weft and llama.cpp's
# llama-batched-bench and llama-server (from the same pinned source), generates
# the `small` model, runs each benchmark on weft and on its peer in
# alternation (A B, B A, ...), and writes a report (medians, ratios
# weft/peer) and PNG plots (gnuplot) beside its raw results; what is current
# goes into docs/BENCHMARKS.md by hand.
#
# Settings (environment): REPS=3 THREADS (default: all cores when the machine
# is quiet, else 1; see below) PP=128 TG=32
# PARALLEL=1,2,4,8,16,32 CTX=8192 BATCH=2048 UBATCH=512 MIXED="..." (extra
# `weft bench mixed` flags) SPILL="--turns 2" FRAME="--frames 150" (flags of
# `weft bench spill` / `frame`, run when the CLI has them) BUILD=build/release
# OUT=$BUILD/bench-compare DOC=$OUT/report.md. Default settings took 11
# minutes on 2 cores that other builds kept busy (load average about 4.7).
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-3}
# llama.cpp's threads wait for each other at every graph node: on cores that
# other work keeps busy, 2 threads stall far more than 1 computes (measured
# here: 10x swings on the tiny model, and many small decodes hit hardest,
# which is not what is being compared). So all cores on a quiet machine, one
# thread on a busy one; the report says which.
if [[ -z "${THREADS:-}" ]]; then
  load=$(cut -d' ' -f1 /proc/loadavg)
  if awk "BEGIN { exit !($load < 0.5 * $(nproc)) }"; then THREADS=$(nproc); else THREADS=1; fi
  echo "bench/compare.sh: load average $load: THREADS=$THREADS (set THREADS to choose)" >&2
fi
PP=${PP:-128}
TG=${TG:-32}
PARALLEL=${PARALLEL:-1,2,4,8,16,32}
CTX=${CTX:-8192}
BATCH=${BATCH:-2048}
UBATCH=${UBATCH:-512}
MIXED=${MIXED:-}
BUILD=${BUILD:-build/release}
OUT=${OUT:-$BUILD/bench-compare}
DOC=${DOC:-$OUT/report.md}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}

die() { echo "bench/compare.sh: $*" >&2; exit 1; }
command -v gnuplot >/dev/null || die "needs gnuplot for the plots: apt-get install gnuplot-nox"
command -v python3 >/dev/null || die "needs python3 for the report: apt-get install python3"
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "REPS=$REPS is not a positive count"

start=$(date +%s)
progress() {  # one line per step: what runs now, and the time so far
  local t=$(( $(date +%s) - start ))
  printf '[%2d:%02d] %s\n' $((t / 60)) $((t % 60)) "$*" >&2
}
trap 'echo "bench/compare.sh: interrupted" >&2; exit 130' INT TERM

progress "building weft and llama.cpp's tools (llama-batched-bench, llama-server) in $BUILD"
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  if [[ "$BUILD" == build/release ]]; then cmake --preset release >/dev/null; else die "$BUILD is not configured"; fi
fi
cmake --build "$BUILD" --target weft-cli llama-tools >/dev/null
base=$(sed -n 's/^WEFT_LLAMA_BUILD_BASE:INTERNAL=//p' "$BUILD/CMakeCache.txt")
tools="$base/tools/bin"
weft="$BUILD/tools/weft/weft"
for b in "$weft" "$tools/llama-batched-bench" "$tools/llama-server"; do
  [[ -x "$b" ]] || die "missing $b after the build"
done

model="$BUILD/models/small.gguf"
if [[ ! -f "$model" ]]; then
  progress "generating the small model ($model)"
  mkdir -p "$(dirname "$model")"
  "$weft" make-model --preset small --seed 1 --out "$model" -q
fi

rm -rf "$OUT"
mkdir -p "$OUT"
loadlog="$OUT/load.txt"
benches=(throughput mixed)
# Benchmarks that land later (spill, frame) run when the CLI has them.
extra=()
for b in spill frame; do
  "$weft" bench --help | grep -qE "^ +$b( |$)" && extra+=("$b")
done
IFS=, read -r -a levels <<<"$PARALLEL"
steps=$(( REPS * (2 * ${#levels[@]} + 2) + ${#extra[@]} ))
step=0
run() {  # run LABEL FILE COMMAND...: one measured run, with the load around it
  local label=$1 file=$2
  shift 2
  step=$((step + 1))
  progress "($step/$steps) $label"
  echo "$label before $(cut -d' ' -f1-3 /proc/loadavg)" >>"$loadlog"
  local rc=0
  timeout --foreground "$RUN_TIMEOUT" "$@" >"$file" 2>"$file.err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    tail -n 20 "$file.err" >&2
    [[ $rc -eq 124 ]] && die "$label did not finish within RUN_TIMEOUT=$RUN_TIMEOUT s"
    die "$label failed (exit $rc); its output is in $file and $file.err"
  fi
  echo "$label after $(cut -d' ' -f1-3 /proc/loadavg)" >>"$loadlog"
}

# One measured run of each engine, weft first in odd repetitions and the peer
# first in even ones (A B, B A, ...), so a load that drifts during the run
# favours neither.
pair() {  # pair REP A B: run the functions A and B in the order of REP
  if (( $1 % 2 )); then "$2" && "$3"; else "$3" && "$2"; fi
}
tp_weft() {
  run "throughput B=$b, weft (rep $rep/$REPS)" "$OUT/throughput-weft-$rep-$b.txt" \
    "$weft" bench throughput -m "$model" --pp "$PP" --tg "$TG" --parallel "$b" --ctx "$CTX" \
    --batch "$BATCH" --ubatch "$UBATCH" --threads "$THREADS" --json "$OUT/throughput-weft-$rep-$b.json"
}
tp_peer() {
  run "throughput B=$b, llama-batched-bench (rep $rep/$REPS)" "$OUT/throughput-peer-$rep-$b.jsonl" \
    "$tools/llama-batched-bench" -m "$model" -npp "$PP" -ntg "$TG" -npl "$b" -c "$CTX" \
    -b "$BATCH" -ub "$UBATCH" -t "$THREADS" -kvu --output-format jsonl
}
# shellcheck disable=SC2086
mixed_weft() {
  run "mixed workload, weft (rep $rep/$REPS)" "$OUT/mixed-weft-$rep.txt" \
    "$weft" bench mixed -m "$model" --target weft --threads "$THREADS" --batch "$BATCH" --ubatch "$UBATCH" -q \
    $MIXED --json "$OUT/mixed-weft-$rep.json"
}
# shellcheck disable=SC2086
mixed_peer() {
  run "mixed workload, llama-server (rep $rep/$REPS)" "$OUT/mixed-server-$rep.txt" \
    "$weft" bench mixed -m "$model" --target server --server "$tools/llama-server" --threads "$THREADS" \
    --batch "$BATCH" --ubatch "$UBATCH" -q --server-log "$OUT/llama-server-$rep.log" \
    $MIXED --json "$OUT/mixed-server-$rep.json"
}
for rep in $(seq 1 "$REPS"); do
  # Throughput pairs run row by row, seconds apart, so that both engines of a
  # pair see nearly the same load; the report takes the median of the pairs.
  for b in "${levels[@]}"; do pair "$rep" tp_weft tp_peer; done
  pair "$rep" mixed_weft mixed_peer
done
# Lighter than their own defaults, so that the whole comparison fits in 20
# minutes on 2 busy cores; SPILL and FRAME replace these flags.
SPILL=${SPILL:---turns 2}
FRAME=${FRAME:---frames 150}
for b in "${extra[@]}"; do
  flags=$SPILL
  [[ $b == frame ]] && flags=$FRAME
  # shellcheck disable=SC2086
  run "$b, weft" "$OUT/$b-weft.txt" "$weft" bench "$b" -m "$model" --threads "$THREADS" $flags \
    --json "$OUT/$b-weft.json"
done

progress "writing $DOC and the plots"
python3 bench/report.py --out "$OUT" --doc "$DOC" --plots "$(dirname "$DOC")/bench" \
  --threads "$THREADS" --reps "$REPS" --seconds $(( $(date +%s) - start ))
progress "done: $DOC"
