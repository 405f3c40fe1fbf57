"""The CPU features the tests expect the server's kernels to use, derived from what the
machine reports, never from a vendor's name: /proc/cpuinfo's flags, less what
GEMMSERVE_MAX_CPU_ISA caps (server/ops/kernels/cpu_features.h), and BLIS's own query
functions for the configuration BLIS would pick by itself.

    flags = kernel_flags({"GEMMSERVE_MAX_CPU_ISA": "avx2"})
    if avx512_build(flags): ...
    expected_blis_config(cap="avx2")   # "haswell" on Zen 5, "zen3" on Zen 4
"""
import functools
import os
import re
import subprocess
import sys

# The flags each level of the cap adds to the one below it (CapCpuFeatures).
_LEVELS = (
    ("generic", set()),
    ("avx2", {"avx2", "fma", "f16c"}),
    ("avx2_vnni", {"avx_vnni"}),
    ("avx512", {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}),
    ("avx512_bf16", {"avx512_bf16"}),
)
# BLIS configurations whose kernels are AVX-512 (BLIS 0.9's x86_64 family).
_BLIS_AVX512_CONFIGS = {"skx", "knl", "knc"}


def cpu_flags():
    """The flags of the CPU, uncapped."""
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def kernel_flags(env=None):
    """cpu_flags() less every flag above the cap in `env` (os.environ by default)."""
    cap = (os.environ if env is None else env).get("GEMMSERVE_MAX_CPU_ISA")
    flags = cpu_flags()
    names = [name for name, _ in _LEVELS]
    if cap not in names:
        return flags
    for _, above in _LEVELS[names.index(cap) + 1:]:
        flags -= above
    return flags


def avx2_build(flags):
    """What the server's AVX2 builds need (CpuFeatures::Avx2Build)."""
    return {"avx2", "fma", "f16c"} <= flags


def avx512_build(flags):
    """What the server's AVX-512 builds need (CpuFeatures::Avx512Build)."""
    return {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"} <= flags


def highest_isa(flags):
    """The highest GEMMSERVE_MAX_CPU_ISA level `flags` reach (HighestCpuIsa)."""
    if avx512_build(flags):
        return "avx512_bf16" if "avx512_bf16" in flags else "avx512"
    if not avx2_build(flags):
        return "generic"
    return "avx2_vnni" if "avx_vnni" in flags else "avx2"


def int8_dot_build(flags):
    """The 8-bit dot-product build the server picks on `flags` (PickInt8Dot, kernel_set.cc),
    as its start-up line names it."""
    if avx512_build(flags) and "avx512_vnni" in flags:
        return "avx512_vnni"
    if avx2_build(flags):
        return "avx_vnni" if "avx_vnni" in flags else "avx2"
    return "generic"


def isa_levels_below(flags=None):
    """The cap levels under what the CPU (`flags`; this one's by default) reaches, highest
    first, each one that changes the kernels: a level that adds nothing the CPU has
    (avx2_vnni without AVX-VNNI) runs what the level below it runs, and is left out."""
    flags = cpu_flags() if flags is None else flags
    names = [name for name, _ in _LEVELS]
    return [names[i] for i in range(names.index(highest_isa(flags)) - 1, -1, -1)
            if i == 0 or _LEVELS[i][1] & flags]


def _blis_library(binary):
    """The libblis the server binary loads (ldd), so the query asks the same BLIS."""
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    match = re.search(r"libblis[^ ]*\s+=>\s+(\S+)", ldd)
    if not match:
        raise AssertionError(f"{binary} does not load libblis:\n{ldd}")
    return match.group(1)


_QUERY = """
import ctypes, sys
blis = ctypes.CDLL(sys.argv[1])
blis.bli_arch_string.restype = ctypes.c_char_p
blis.bli_init()
print(blis.bli_arch_string(blis.bli_arch_query_id()).decode())
"""


@functools.lru_cache(maxsize=None)
def blis_own_choice(binary):
    """The configuration BLIS picks by itself on this CPU (bli_arch_query_id with no
    BLIS_ARCH_TYPE set), asked in a child process of the library `binary` loads."""
    env = {k: v for k, v in os.environ.items() if k != "BLIS_ARCH_TYPE"}
    return subprocess.run([sys.executable, "-c", _QUERY, _blis_library(binary)], env=env,
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()


_NUMBER = """
import ctypes, sys
blis = ctypes.CDLL(sys.argv[1])
blis.bli_arch_string.restype = ctypes.c_char_p
# arch_t runs from 0 to BLIS_ARCH_GENERIC, the last configuration.
for number in range(64):
    name = blis.bli_arch_string(number).decode()
    if name == sys.argv[2] or name == "generic":
        break
print(number if name == sys.argv[2] else -1)
"""


@functools.lru_cache(maxsize=None)
def blis_config_number(binary, name):
    """The arch_t number BLIS_ARCH_TYPE takes for the configuration `name`, from BLIS's own
    table of names (bli_arch_string) in the library `binary` loads."""
    number = int(subprocess.run([sys.executable, "-c", _NUMBER, _blis_library(binary), name],
                                capture_output=True, text=True, check=True, timeout=60).stdout)
    if number < 0:
        raise AssertionError(f"this BLIS has no configuration named {name}")
    return number


def blis_config_for(own, flags, cpu):
    """The rule of BlisArchitectureFor (server/ops/kernels/compute_environment.h): the BLIS
    configuration the server runs, given BLIS's own choice `own`, the kernels' (capped)
    `flags` and the CPU's own flags `cpu`."""
    capped = highest_isa(flags) != highest_isa(cpu)
    if avx512_build(flags):
        return "skx"
    if {"avx2", "fma"} <= flags:
        if own == "generic" or (capped and own in _BLIS_AVX512_CONFIGS):
            return "haswell"
        return own
    return "generic" if capped else own


def expected_blis_config(binary, cap=None):
    """The BLIS configuration the server must report under GEMMSERVE_MAX_CPU_ISA=`cap`
    (None: uncapped), from the machine's flags and BLIS's own choice on it."""
    flags = kernel_flags({} if cap is None else {"GEMMSERVE_MAX_CPU_ISA": cap})
    return blis_config_for(blis_own_choice(binary), flags, cpu_flags())


def main(argv):
    """`python3 -m gemmserve_testing.cpu --guard LEVEL`: exit 0 when LEVEL is one of this
    CPU's levels below its own that change the kernels, else say why and exit 77 (ctest's
    skip): the guard of the suites ctest runs again under each cap."""
    if len(argv) != 2 or argv[0] != "--guard":
        print("usage: python3 -m gemmserve_testing.cpu --guard LEVEL", file=sys.stderr)
        return 2
    levels = isa_levels_below()
    if argv[1] in levels:
        return 0
    print(f"GEMMSERVE_MAX_CPU_ISA={argv[1]} changes no kernel on this CPU "
          f"({highest_isa(cpu_flags())}; the levels below it that do: "
          f"{', '.join(levels) or 'none'})")
    return 77


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
