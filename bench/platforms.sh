#!/usr/bin/env bash
# bench/platforms.sh — the same C ABI throughput program (bench/capi_throughput.c)
# against each build of the plugin on this machine, alternating (A B C D, D C B A,
# ...), and a Markdown table of medians on stdout:
#   native    build/release   (-march=native)
#   portable  build/dist      (the best CPU variant, chosen at run time)
#   <variant> build/dist      with WEFT_CPU_VARIANT=<variant> (VARIANTS, e.g. haswell)
#   windows   build/windows   weft.dll under wine64 (private prefix, headless)
# Builds that are not there are left out and said so.
#
# Settings (environment): REPS=5 CONV=4 PP=128 TG=32 THREADS=2 VARIANTS=haswell
# MODEL (default: build/release/models/small.gguf, made with the native CLI).
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-5}
CONV=${CONV:-4}
PP=${PP:-128}
TG=${TG:-32}
THREADS=${THREADS:-2}
VARIANTS=${VARIANTS:-haswell}
MODEL=${MODEL:-build/release/models/small.gguf}
OUT=${OUT:-build/bench-platforms}

die() { echo "bench/platforms.sh: $*" >&2; exit 1; }
if [[ ! -f "$MODEL" ]]; then
  [[ -x build/release/tools/weft/weft ]] || die "no $MODEL and no build/release/tools/weft/weft to make it"
  mkdir -p "$(dirname "$MODEL")"
  build/release/tools/weft/weft make-model --preset small --seed 1 --out "$MODEL" -q
fi
mkdir -p "$OUT"
rm -f "$OUT"/*.txt

names=() cmds=()
add() { names+=("$1"); cmds+=("$2"); }
args="$MODEL $CONV $PP $TG $THREADS 1"
if [[ -x build/release/tests/capi_throughput ]]; then
  add native "build/release/tests/capi_throughput $args"
else
  echo "left out: native (cmake --build build/release --target capi_throughput)" >&2
fi
if [[ -x build/dist/tests/dist/capi_throughput ]]; then
  add portable "build/dist/tests/dist/capi_throughput $args"
  for v in ${VARIANTS//,/ }; do add "$v" "env WEFT_CPU_VARIANT=$v build/dist/tests/dist/capi_throughput $args"; done
else
  echo "left out: portable (cmake --workflow --preset dist)" >&2
fi
wine_prefix="$PWD/build/windows/wine-prefix"
if [[ -x build/windows/tests/windows/capi_throughput.exe ]]; then
  export WEFT_WINEPREFIX="$wine_prefix"
  sh tests/windows/wine.sh start
  trap 'sh tests/windows/wine.sh stop' EXIT
  add windows "sh tests/windows/wine.sh run 900 build/windows/tests/windows/capi_throughput.exe $args"
else
  echo "left out: windows (cmake --workflow --preset windows)" >&2
fi
[[ ${#names[@]} -gt 0 ]] || die "no build to measure"

for ((r = 0; r < REPS; ++r)); do
  order=$(seq 0 $((${#names[@]} - 1)))
  ((r % 2)) && order=$(echo "$order" | tac)
  for i in $order; do
    line=$(OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-active} ${cmds[$i]} | tr -d '\r' | grep '^median') || die "${names[$i]} failed"
    echo "${names[$i]} $line" | tee -a "$OUT/${names[$i]}.txt" >&2
  done
done

python3 - "$OUT" "${names[@]}" <<'PY'
import re, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
rows = {}
for n in names:
    pp, tg, variant = [], [], "?"
    for line in open(f"{out}/{n}.txt"):
        m = re.search(r"pp_tok_s=([\d.]+) tg_tok_s=([\d.]+) variant=(\S+)", line)
        pp.append(float(m[1])); tg.append(float(m[2])); variant = m[3]
    rows[n] = (statistics.median(pp), statistics.median(tg), variant, len(pp))
base = rows.get("native") or next(iter(rows.values()))
print("| build | cpu code | prompt tok/s | vs native | generation tok/s | vs native | runs |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for n, (pp, tg, v, k) in rows.items():
    print(f"| {n} | {v} | {pp:.1f} | {pp / base[0]:.3f} | {tg:.1f} | {tg / base[1]:.3f} | {k} |")
PY
