#!/usr/bin/env bash
# Installs llama.cpp's prebuilt ggml CPU libraries (npm's
# @node-llama-cpp/linux-x64 3.22.1, pinned with its integrity hash by
# bench/ggml/package-lock.json) into DIR with `npm ci`, once per lock file, and
# prints the directory gemmserve-bench's --ggml_dir takes. Needs the npm
# registry the first time; exits non-zero (and says why) without it.
#
#   dir=$(bench/ggml/install.sh build/ggml) && build/bin/gemmserve-bench --ggml_dir="$dir"
set -euo pipefail

package_dir=$(cd "$(dirname "$0")" && pwd)
npm_dir=${1:?usage: install.sh DIR}
bins="$npm_dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"

if [ "$(uname -m)" != x86_64 ]; then
  echo "ggml install: the prebuilt libraries are for x86-64 Linux, not $(uname -m)" >&2
  exit 1
fi
if ! command -v npm >/dev/null; then
  echo "ggml install: 'npm' not found (Node.js with npm is needed to fetch the libraries)" >&2
  exit 1
fi
# The stamp is written only after a complete install, so an interrupted one is redone.
mkdir -p "$npm_dir"
if ! cmp -s "$package_dir/package-lock.json" "$npm_dir/installed-package-lock.json" ||
   [ ! -f "$bins/libggml.v0.5.0.so" ]; then
  cp "$package_dir/package.json" "$package_dir/package-lock.json" "$npm_dir/"
  echo "ggml install: npm ci in $npm_dir" >&2
  (cd "$npm_dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2) || {
    echo "ggml install: npm ci failed: needs the npm registry for @node-llama-cpp/linux-x64" >&2
    exit 1
  }
  cp "$package_dir/package-lock.json" "$npm_dir/installed-package-lock.json"
fi
echo "$bins"
