"""What a test can read of a running server process from the outside: its
memory (Linux /proc), its /metrics, and whether it was built with sanitizers.

    memory = ProcessMemory(server.proc.pid)
    memory.reset_peak()
    ... a request ...
    growth = memory.peak_growth()       # bytes of resident memory, peak minus before
    value = metric_sum(server.metrics_url, "gemmserve_admitted_bytes_total", model="matmul")
"""
import functools
import re
import shutil
import subprocess
import urllib.request

from .server import server_binary


class ProcessMemory:
    """Resident memory of a process: VmRSS now and VmHWM (its peak), whose mark the
    kernel resets when "5" is written to /proc/PID/clear_refs (Linux 4.0+)."""

    def __init__(self, pid):
        self.pid = pid
        self._before = None

    def status(self):
        values = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "VmSize", "VmPeak"):
                    values[key] = int(rest.split()[0]) * 1024
        return values

    def reset_peak(self):
        with open(f"/proc/{self.pid}/clear_refs", "w") as f:
            f.write("5")
        self._before = self.status()["VmRSS"]

    def peak_growth(self):
        """Peak resident memory since reset_peak(), minus what was resident then."""
        return self.status()["VmHWM"] - self._before


def limit_address_space(pid, limit_bytes):
    """Sets the running process's RLIMIT_AS (util-linux prlimit), so that an allocation past
    it fails for real, as it would on a host out of memory."""
    limit = int(limit_bytes)
    subprocess.run([shutil.which("prlimit") or "/usr/bin/prlimit", f"--pid={pid}",
                    f"--as={limit}:{limit}"], check=True)


def limit_descriptors(pid, limit):
    """Sets the running process's RLIMIT_NOFILE (util-linux prlimit) and checks, in
    /proc/<pid>/limits, that it took effect: a test of running out of descriptors must
    not pass because the limit was never set."""
    subprocess.run([shutil.which("prlimit") or "/usr/bin/prlimit", f"--pid={pid}",
                    f"--nofile={limit}:{limit}"], check=True)
    with open(f"/proc/{pid}/limits") as f:
        line = next(line for line in f if line.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    if (soft, hard) != (str(limit), str(limit)):
        raise AssertionError(f"RLIMIT_NOFILE of {pid} is {soft}:{hard}, not {limit}:{limit}")


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        if r.status != 200:
            raise AssertionError(f"/metrics answered {r.status}")
        return r.read().decode()


def metric_samples(url, family):
    """[(labels dict, value)] of every sample of `family` in a scrape."""
    samples = []
    for m in re.finditer(rf"^{re.escape(family)}(?:\{{([^}}]*)\}})? (\S+)$", scrape(url), re.M):
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1) or ""))
        samples.append((labels, float(m.group(2))))
    return samples


def metric_sum(url, family, **labels):
    """The sum of `family` over the samples whose labels include `labels`."""
    return sum(v for l, v in metric_samples(url, family)
               if all(l.get(k) == str(want) for k, want in labels.items()))


@functools.lru_cache(maxsize=None)
def server_is_sanitized():
    """True for a server built with ASan or TSan (tests/asan.sh, tests/tsan.sh): its
    memory figures mean nothing (shadow memory, the sanitizer's own allocator) and it
    cannot run under an address-space limit (both reserve terabytes)."""
    with open(server_binary(), "rb") as f:
        binary = f.read()
    return b"__asan_init" in binary or b"__tsan_init" in binary
