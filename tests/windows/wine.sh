#!/bin/sh
# Runs Windows programs of the `windows` build under wine64, headless, in a
# private prefix. Every wait is bounded (coreutils timeout).
#   wine.sh start            create/update the prefix (wineboot -i)
#   wine.sh stop             stop this prefix's wineserver
#   wine.sh run SECONDS PROGRAM [ARGS...]   run one program, its exit status
# Environment: WEFT_WINEPREFIX (required), WEFT_WINE64 (default
# /usr/lib/wine/wine64, Debian 12's wine64 package), WEFT_WINESERVER.
set -eu
: "${WEFT_WINEPREFIX:?WEFT_WINEPREFIX must name the private prefix}"
wine64="${WEFT_WINE64:-/usr/lib/wine/wine64}"
wineserver="${WEFT_WINESERVER:-/usr/lib/wine/wineserver64}"
command -v "$wine64" >/dev/null 2>&1 || { echo "wine.sh: $wine64 not found (Debian: apt-get install wine64)" >&2; exit 1; }
export WINEPREFIX="$WEFT_WINEPREFIX"
export WINEDEBUG=-all
# No Mono or Gecko installer dialogs: console programs need neither.
export WINEDLLOVERRIDES="mscoree=;mshtml="
# Headless: console programs need no X server; never talk to one.
unset DISPLAY WAYLAND_DISPLAY
case "${1:-}" in
  start)
    mkdir -p "$WINEPREFIX"
    timeout 300 "$wine64" wineboot -i >/dev/null 2>&1 || { echo "wine.sh: wineboot -i failed or took over 300 s" >&2; exit 1; }
    ;;
  stop)
    timeout 60 "$wineserver" -k 2>/dev/null || true
    timeout 60 "$wineserver" -w 2>/dev/null || true
    ;;
  run)
    secs="$2"
    shift 2
    exec timeout -k 10 "$secs" "$wine64" "$@"
    ;;
  *)
    echo "usage: wine.sh start|stop|run SECONDS PROGRAM [ARGS...]" >&2
    exit 2
    ;;
esac
