"""Starts the real gemmserve binary for a test and stops it afterwards.

The server binds an ephemeral port (--grpc_port=0) and announces it with one
stdout line, `gemmserve listening on 127.0.0.1:PORT`; start() waits for that
line (with a deadline, never a sleep) and fails with the server's stderr when
the process exits or stays silent instead.
"""
import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from gemmserve_testing.cpu import highest_isa, int8_dot_build, kernel_flags

# What ASan, LeakSanitizer, UBSan and TSan print when they find something, in
# a server built with them (tests/asan.sh).
_SANITIZER_REPORT = re.compile(rb"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: |"
                               rb"WARNING: ThreadSanitizer")
# (127.0.0.1 unless a test binds elsewhere: a shard in a network namespace of its own.)
_READY_LINE = re.compile(rb"^gemmserve listening on [0-9.]+:(\d+)\r?\n$")
_METRICS_LINE = re.compile(rb"^gemmserve metrics on 127\.0\.0\.1:(\d+)\r?\n$")
_HTTP_LINE = re.compile(rb"^gemmserve http on 127\.0\.0\.1:(\d+)\r?\n$")


def server_binary():
    path = os.environ.get("GEMMSERVE_BIN")
    if not path:
        raise RuntimeError("GEMMSERVE_BIN is not set: run the tests through ctest, or set it "
                           "to build/bin/gemmserve")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"GEMMSERVE_BIN={path} is not an executable file")
    return path


def _with_parent_death_signal(argv):
    """If the test process dies (a ctest timeout kills it), the kernel kills the server
    too instead of leaving it orphaned. setpriv (util-linux, always on Debian) sets the
    parent-death signal and execs the server: no preexec_fn, since a Python fork() with
    gRPC channels open trips gRPC's fork handlers (SIGSEGV / an assertion in its thread
    pool); without preexec_fn subprocess spawns with vfork, which runs no fork handlers."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", *argv] if setpriv else list(argv)


def _where_it_waits(pid):
    """What each thread of a process that does not answer is doing, from /proc: its
    program, and per thread its name, state, kernel wait channel and system call."""
    def read(path):
        try:
            with open(path, "rb") as f:
                return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError as e:
            return f"({e.strerror})"
    lines = [f"pid {pid}: {read(f'/proc/{pid}/cmdline')}"]
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError as e:
        return "\n".join(lines + [f"no /proc/{pid}/task ({e.strerror})"])
    for tid in tids[:64]:
        task = f"/proc/{pid}/task/{tid}"
        state = read(f"{task}/stat").rsplit(")", 1)[-1].split()[:1]
        lines.append(f"  {tid} {read(f'{task}/comm')} state={''.join(state)} "
                     f"wchan={read(f'{task}/wchan')} syscall={read(f'{task}/syscall')}")
        stack = read(f"{task}/stack")
        if stack and not stack.startswith("("):
            lines.extend("      " + frame for frame in stack.splitlines()[:3])
    return "\n".join(lines)


class SanitizerReport(Exception):
    """The server's stderr holds a sanitizer's report. Not an AssertionError, so a
    test that expects the server to fail (assertRaises(AssertionError)) cannot
    take it for the failure it expected."""


class ServerProcess:
    """`env`: extra environment variables of the server."""

    def __init__(self, *flags, compute_threads=2, start_timeout=30.0, env=None):
        # Metrics on a free port too, unless a test picks; the port is read back
        # from the second stdout line.
        metrics = [] if any(f.startswith("--metrics_port") for f in flags) else ["--metrics_port=0"]
        # The HTTP port too (announced on the third line), unless a test picks.
        http = [] if any(f.startswith("--http_port") for f in flags) else ["--http_port=0"]
        self.flags = ["--grpc_port=0", "--host=127.0.0.1",
                      f"--compute_threads={compute_threads}", *metrics, *http, *flags]
        self.metrics_port = None
        self.http_port = None
        self.start_timeout = start_timeout
        self.env = env
        self.proc = None
        self.port = None
        self._stderr = None
        self._drainer = None

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    @property
    def http_url(self):
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def metrics_url(self):
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self):
        binary = server_binary()
        self._stderr = tempfile.TemporaryFile()
        env = None if self.env is None else {**os.environ, **self.env}
        self.proc = subprocess.Popen(_with_parent_death_signal([binary, *self.flags]), env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._stderr)
        try:
            self.port = self._read_port_line(_READY_LINE, "first stdout line")
            if "--metrics_port=-1" not in self.flags:
                self.metrics_port = self._read_port_line(_METRICS_LINE, "metrics line")
            if "--http_port=-1" not in self.flags:
                self.http_port = self._read_port_line(_HTTP_LINE, "http line")
            self._check_cpu_isa_cap(env)
        except BaseException:
            self._kill()
            raise
        # Keep draining stdout so that a chatty server can never block on a full pipe.
        self._drainer = threading.Thread(target=self._drain_stdout, daemon=True)
        self._drainer.start()
        return self

    def _check_cpu_isa_cap(self, env):
        """Under GEMMSERVE_MAX_CPU_ISA (ctest's capped runs of a suite), the server must
        say that it runs capped: a suite that meant to drive the AVX2 or portable kernels
        must not pass on AVX-512 ones."""
        cap = (os.environ if env is None else env).get("GEMMSERVE_MAX_CPU_ISA")
        if not cap:
            return
        text = self.stderr_text(limit=1 << 20)
        if f"GEMMSERVE_MAX_CPU_ISA={cap}" not in text:
            raise AssertionError(f"GEMMSERVE_MAX_CPU_ISA={cap} is set but gemmserve does not "
                                 f"report running under it; stderr:\n{self.stderr_text()}")
        # The level and the 8-bit build the cap selects on this CPU (cpu.py's rules).
        flags = kernel_flags(os.environ if env is None else env)
        for said in (f"kernels {highest_isa(flags)} (GEMMSERVE_MAX_CPU_ISA={cap};",
                     f"8-bit dot products {int8_dot_build(flags)},"):
            if said not in text:
                raise AssertionError(f"under GEMMSERVE_MAX_CPU_ISA={cap} gemmserve should say "
                                     f"{said!r}; stderr:\n{self.stderr_text()}")

    def _read_port_line(self, pattern, what):
        """The port of the next stdout line, which must match `pattern`."""
        line = self._read_ready_line()
        match = pattern.match(line)
        if not match:
            raise AssertionError(f"expected the {what} from gemmserve, got {line!r}; "
                                 f"stderr:\n{self.stderr_text()}")
        return int(match.group(1))

    def _read_ready_line(self):
        deadline = time.monotonic() + self.start_timeout
        line = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n"):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"gemmserve printed no ready line within {self.start_timeout}s "
                        f"(got {line!r}); stderr:\n{self.stderr_text()}\n"
                        f"where it waits:\n{_where_it_waits(self.proc.pid)}")
                if not sel.select(remaining):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 1)
                if not chunk:
                    code = self.proc.wait(timeout=10)
                    raise AssertionError(
                        f"gemmserve {' '.join(self.flags)} exited with code {code} before "
                        f"it was ready (stdout {line!r}); stderr:\n{self.stderr_text()}")
                line += chunk
        return line

    def _drain_stdout(self):
        for _ in self.proc.stdout:
            pass

    def check_sanitizers(self):
        """Raises SanitizerReport if a sanitizer reported anything so far."""
        if self._stderr is None:
            return
        self._stderr.flush()
        self._stderr.seek(0)
        text = self._stderr.read()
        found = _SANITIZER_REPORT.search(text)
        if found:
            start = max(0, text.rfind(b"\n", 0, found.start()) + 1)
            raise SanitizerReport(f"gemmserve {' '.join(self.flags)}: sanitizer report:\n" +
                                  text[start:start + 8000].decode("utf-8", "replace"))

    def stderr_text(self, limit=8000):
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0)
        text = self._stderr.read().decode("utf-8", "replace")
        return text if len(text) <= limit else "...\n" + text[-limit:]

    def assert_alive(self):
        code = self.proc.poll()
        if code is not None:
            raise AssertionError(f"gemmserve died with code {code}; stderr:\n"
                                 f"{self.stderr_text()}")

    def stop(self, timeout=30.0):
        """SIGTERM, then expects the process to exit 0 within `timeout`."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                message = f"gemmserve ignored SIGTERM for {timeout}s; stderr:\n"
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(message + self.stderr_text()) from None
            self.check_sanitizers()
            if code != 0:
                raise AssertionError(f"gemmserve exited with code {code} after SIGTERM; "
                                     f"stderr:\n{self.stderr_text()}")
        finally:
            self._close()

    def _kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        try:
            self.check_sanitizers()
        finally:
            self._close()

    def _close(self):
        if self._drainer is not None:
            self._drainer.join(timeout=5)  # the process is gone: stdout is at EOF
            self._drainer = None
        if self.proc.stdout:
            self.proc.stdout.close()
        if self._stderr:
            self._stderr.close()
            self._stderr = None
