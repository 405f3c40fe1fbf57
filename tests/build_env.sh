# Sourced by tests/run.sh, tests/asan_tree.sh and tests/tsan.sh (from the repository root):
# what every build tree of the gate is configured with, in the array
# GEMMSERVE_CMAKE_ARGS (docs/testing.md):
#
# - ccache as the compiler launcher, where it is installed (scripts/
#   install_deps.sh --test installs it) and GEMMSERVE_CCACHE is not 0. Paths
#   under the clone are hashed relative to it (CCACHE_BASEDIR) and the working
#   directory is left out of the hash (CCACHE_NOHASHDIR, for the -g trees), so
#   a clone in another folder hits what an earlier one compiled. Depend mode
#   (CCACHE_DEPEND) takes the headers from the compiler's -MD output instead
#   of running the preprocessor first, so a miss costs next to nothing more
#   than the compile. The cache is ccache's own (~/.cache/ccache); a cold
#   machine builds as without it.
# - -DGEMMSERVE_WERROR=ON (warnings are errors, our targets only) under CI=true
#   or GEMMSERVE_WERROR=1; OFF otherwise, so a compiler other than the ones CI
#   builds with does not stop a user.
#
# - Ninja for a new tree where it is installed (gemmserve_generator DIR): it
#   compiles a library's files while the libraries below it still build,
#   where Make waits for each library in turn; with the serving layers as
#   unity builds of a few large units, Make kept the TSan tree's 2 cores 68%
#   busy. A tree keeps the generator it was made with; without ninja, Make.
#
#   source tests/build_env.sh
#   cmake -S . -B build $(gemmserve_generator build) "${GEMMSERVE_CMAKE_ARGS[@]}" ...

GEMMSERVE_CMAKE_ARGS=()
if [[ "${GEMMSERVE_CCACHE:-1}" != 0 ]] && command -v ccache >/dev/null 2>&1; then
  CCACHE_BASEDIR=$(pwd)
  export CCACHE_BASEDIR
  export CCACHE_NOHASHDIR=true CCACHE_DEPEND=true
  GEMMSERVE_CMAKE_ARGS+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
else
  GEMMSERVE_CMAKE_ARGS+=(-UCMAKE_C_COMPILER_LAUNCHER -UCMAKE_CXX_COMPILER_LAUNCHER)
fi
if [[ "${CI:-}" == true || "${GEMMSERVE_WERROR:-0}" == 1 ]]; then
  GEMMSERVE_CMAKE_ARGS+=(-DGEMMSERVE_WERROR=ON)
else
  GEMMSERVE_CMAKE_ARGS+=(-DGEMMSERVE_WERROR=OFF)
fi

# gemmserve_generator DIR: prints -GNinja when DIR is not yet a CMake tree
# and ninja is installed; nothing otherwise (the tree's own, or Make).
gemmserve_generator() {
  if [[ ! -f "$1/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
    echo "-GNinja"
  fi
}
