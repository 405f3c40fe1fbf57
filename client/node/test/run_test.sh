#!/usr/bin/env bash
# The Node.js client's ctest test (client_node): installs the npm packages
# pinned by package-lock.json into NPM_DIR (once per lock file, with `npm ci`),
# then runs test/client.test.js (gRPC) and test/http.test.js (HTTP/REST) with
# node's test runner against a real gemmserve ($GEMMSERVE_BIN, started by each
# test file itself).
#
#   GEMMSERVE_BIN=build/bin/gemmserve client/node/test/run_test.sh build/client/node
set -euo pipefail

package_dir=$(cd "$(dirname "$0")/.." && pwd)
npm_dir=${1:?usage: run_test.sh NPM_DIR}

# A missing Node.js is a failure, never a silent skip.
for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "client_node: '$tool' not found: this test needs Node.js >= 18 with npm" >&2
    exit 1
  fi
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
  echo "client_node: Node.js $(node --version) is too old: the client needs >= 18" >&2
  exit 1
fi

# The stamp is written only after a complete install, so an interrupted one is redone.
mkdir -p "$npm_dir"
if ! cmp -s "$package_dir/package-lock.json" "$npm_dir/installed-package-lock.json"; then
  cp "$package_dir/package.json" "$package_dir/package-lock.json" "$npm_dir/"
  echo "client_node: npm ci in $npm_dir"
  (cd "$npm_dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) || {
    echo "client_node: npm ci failed: the test needs the npm registry for" \
         "@grpc/grpc-js and @grpc/proto-loader" >&2
    exit 1
  }
  cp "$package_dir/package-lock.json" "$npm_dir/installed-package-lock.json"
fi

export NODE_PATH="$npm_dir/node_modules"
exec node --test "$package_dir/test/client.test.js" "$package_dir/test/http.test.js"
