"""The CPU features the tests expect the server's kernels to use: /proc/cpuinfo's flags,
less what GEMMSERVE_MAX_CPU_ISA caps (server/ops/kernels/cpu_features.h)."""
import os

# The flags each level of the cap adds to the one below it.
_LEVELS = (
    ("generic", set()),
    ("avx2", {"avx2", "fma", "f16c"}),
    ("avx512", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
    ("avx512_bf16", {"avx512_bf16"}),
)


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


def kernels_have(flag):
    return flag in kernel_flags()
