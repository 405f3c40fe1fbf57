#!/usr/bin/env bash
# The container stage of the suite (docs/deployment.md): builds the image in a
# real Docker engine and runs tests/container/test_container.py against it:
# the image through published loopback ports under the Kubernetes manifest's
# restrictions, its HEALTHCHECK with default and moved ports, `docker stop`
# with a request in flight, a model repository mounted from the host, and
# docker-compose with Prometheus scraping gemmserve.
#
# Which image (docs/testing.md):
# - from the binaries the Release stage built (build/bin), on the Dockerfile's
#   runtime stage (tests/container/prebuilt.Dockerfile): the gate's default,
#   about 2 minutes, no second compile;
# - from source, `docker build .` exactly as docs/deployment.md has users do: when
#   what that build reads besides the sources (the Dockerfile, .dockerignore,
#   deploy/, the dependency list) differs from what it last passed with
#   (tests/container/from-source.sha256, which a passing build rewrites: commit
#   it), with GEMMSERVE_LONG=1, or GEMMSERVE_CONTAINER_FROM_SOURCE=1. About 8
#   minutes on 2 cores.
#
# Starts its own dockerd when none runs (and stops it afterwards); makes the
# base image debian:bookworm-slim with debootstrap when it is missing (Docker
# Hub is out of reach here; the image stays cached); removes every container,
# network and image it made but the base. Skipped, saying why, with
# GEMMSERVE_SKIP_CONTAINER=1 or where no engine can start.
#
#   tests/container.sh
#   tests/container.sh --checks-after FILE   # build the image now, check it once
#                                            # FILE exists (tests/run.sh: the image
#                                            # is made while the sanitizer stages run)
set -euo pipefail
cd "$(dirname "$0")/.."
checks_after=""
if [[ "${1:-}" == --checks-after ]]; then
  checks_after=${2:?"--checks-after FILE"}
fi

if [[ "${GEMMSERVE_SKIP_CONTAINER:-0}" == 1 ]]; then
  echo "container: skipped (GEMMSERVE_SKIP_CONTAINER=1)"
  exit 0
fi
# cannot_run REASON: in CI (CI=true) a stage that cannot run fails, unless
# GEMMSERVE_SKIP_CONTAINER=1 says to skip it; elsewhere it is skipped, with exit
# status 77, which tests/run.sh lists as a skip, not a pass.
cannot_run() {
  if [[ "${CI:-}" == true ]]; then
    echo "container: cannot run: $1 (GEMMSERVE_SKIP_CONTAINER=1 skips this stage)" >&2
    exit 1
  fi
  echo "container: skipped: $1"
  exit 77
}
DOCKER=/usr/bin/docker  # the package's client; a newer static one may come first in PATH
IMAGE=gemmserve:test
BUILD_DIR=${BUILD_DIR:-build}
if [[ "$(id -u)" -ne 0 ]] && ! "$DOCKER" info >/dev/null 2>&1; then
  cannot_run "no Docker engine runs, and starting one needs root"
fi
scripts/install_deps.sh --container

work=$(mktemp -d /tmp/gemmserve-container-XXXXXX)
daemon_pid=""
cleanup() {
  "$DOCKER" ps -aq --filter "ancestor=$IMAGE" | xargs -r "$DOCKER" rm -f >/dev/null 2>&1 || true
  "$DOCKER" image rm -f "$IMAGE" gemmserve-runtime:test gemmserve-test-prometheus:latest \
    >/dev/null 2>&1 || true
  "$DOCKER" image prune -f --filter label=gemmserve.stage=build >/dev/null 2>&1 || true
  if [[ -n "$daemon_pid" ]]; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # the cleanup runs when tests/run.sh stops early too

if ! "$DOCKER" info >/dev/null 2>&1; then
  /usr/sbin/dockerd --storage-driver=overlay2 >"$work/dockerd.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 1 60); do  # the daemon's socket, up to a minute
    "$DOCKER" info >/dev/null 2>&1 && break
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 1
  done
  if ! "$DOCKER" info >/dev/null 2>&1; then
    tail -5 "$work/dockerd.log" >&2 || true
    daemon_pid=""
    cannot_run "dockerd would not start here (its log's end above)"
  fi
  echo "container: started dockerd"
fi

# What the published debian:bookworm-slim does (debuerreotype --slimify): dpkg
# leaves out documentation, manuals and translations, also for packages
# installed later, and apt keeps no package cache or lists in the image.
slim_base() {
  local root=$1
  cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/man/*
DPKG
  cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  rm -rf "$root"/usr/share/{info,man,linda,lintian/overrides}/* \
         "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/*
}

if ! "$DOCKER" image inspect debian:bookworm-slim >/dev/null 2>&1; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "container: making debian:bookworm-slim with debootstrap from $mirror"
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  slim_base "$work/rootfs"
  tar -C "$work/rootfs" -c . | "$DOCKER" import -c 'CMD ["bash"]' - debian:bookworm-slim >/dev/null
  rm -rf "$work/rootfs"
fi

# What the from-source build reads besides the sources.
source_build_inputs() {
  find Dockerfile .dockerignore deploy scripts/install_deps.sh cmake/Dependencies.cmake \
    -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}
STAMP=tests/container/from-source.sha256
inputs=$(source_build_inputs)
from_source=""
if [[ "${GEMMSERVE_LONG:-0}" == 1 ]]; then
  from_source="GEMMSERVE_LONG=1"
elif [[ "${GEMMSERVE_CONTAINER_FROM_SOURCE:-0}" == 1 ]]; then
  from_source="GEMMSERVE_CONTAINER_FROM_SOURCE=1"
elif [[ "$(cat "$STAMP" 2>/dev/null)" != "$inputs" ]]; then
  from_source="the Dockerfile, .dockerignore, deploy/ or the dependency list changed since $STAMP"
fi

# The checks use the host's client library, stubs and gemmserve-cli; the
# prebuilt image, its server too.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target gemmserve gemmserve-cli gemmserve_python_stubs \
  >/dev/null

start=$(date +%s)
if [[ -n "$from_source" ]]; then
  echo "container: building $IMAGE from source ($from_source)"
  "$DOCKER" build --network host -t "$IMAGE" . >"$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log" >&2; exit 1; }
else
  echo "container: building $IMAGE from $BUILD_DIR/bin on the Dockerfile's runtime stage"
  "$DOCKER" build --network host --target runtime -t gemmserve-runtime:test . \
    >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
  context="$work/prebuilt"
  mkdir -p "$context/bin"
  cp "$BUILD_DIR/bin/gemmserve" "$BUILD_DIR/bin/gemmserve-cli" "$context/bin/"
  /usr/bin/python3 scripts/make_model_repository.py "$context/model_repository" \
    --sharded "$context/sharded" >/dev/null
  "$DOCKER" build -f tests/container/prebuilt.Dockerfile \
    --build-arg RUNTIME=gemmserve-runtime:test -t "$IMAGE" "$context" >>"$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log" >&2; exit 1; }
fi
"$DOCKER" image prune -f --filter label=gemmserve.stage=build >/dev/null
size=$("$DOCKER" image inspect -f '{{.Size}}' "$IMAGE")
base=$("$DOCKER" image inspect -f '{{.Size}}' debian:bookworm-slim)
echo "container: built $IMAGE in $(( $(date +%s) - start )) s: $(( size / 1000000 )) MB" \
     "($(( base / 1000000 )) MB of it the base image)"
echo "container: image ready after $SECONDS s (engine, base image, build)"
if [[ -n "$checks_after" ]]; then
  # Waits for the word, or until whoever started this is gone (a day at most).
  parent=$PPID
  for _ in $(seq 1 86400); do
    [[ -e "$checks_after" ]] && break
    kill -0 "$parent" 2>/dev/null || { echo "container: the gate ended first" >&2; exit 1; }
    sleep 1
  done
fi
start=$(date +%s)
GEMMSERVE_IMAGE="$IMAGE" GEMMSERVE_CLI="$BUILD_DIR/bin/gemmserve-cli" \
  PYTHONPATH="$BUILD_DIR/python:tests/python_lib:client/python" PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 tests/container/test_container.py -v
echo "container: checks passed in $(( $(date +%s) - start )) s"
if [[ -n "$from_source" && "$(cat "$STAMP" 2>/dev/null)" != "$inputs" ]]; then
  echo "$inputs" >"$STAMP"
  echo "container: the from-source image passed: $STAMP updated; commit it, and the gate" \
       "builds from $BUILD_DIR/bin until these inputs change again"
fi
