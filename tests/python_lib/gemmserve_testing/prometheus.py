"""Debian's real Prometheus server, on loopback, scraping a gemmserve.

    prom = PrometheusProcess(scrape_url_port=server.metrics_port).start()
    value = prom.wait_for('sum(gemmserve_requests_total{code="OK"})', lambda v: v == 20)
    prom.stop()
"""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

from .server import _with_parent_death_signal

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusProcess:
    def __init__(self, target_port, scrape_interval="1s"):
        self.target_port = target_port
        self.scrape_interval = scrape_interval
        self.dir = tempfile.mkdtemp(prefix="gemmserve-prometheus-")
        self.port = None
        self.proc = None
        self._log = None

    def start(self, timeout=60):
        if not os.access(PROMETHEUS, os.X_OK):
            raise RuntimeError("prometheus is not installed (tests/run.sh installs Debian's "
                               "prometheus package via scripts/install_deps.sh --test)")
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n"
                    f"  scrape_interval: {self.scrape_interval}\n"
                    "scrape_configs:\n"
                    "  - job_name: gemmserve\n"
                    "    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{self.target_port}']\n")
        self.port = free_port()
        self._log = open(os.path.join(self.dir, "log.txt"), "wb")
        self.proc = subprocess.Popen(_with_parent_death_signal([
            PROMETHEUS, f"--config.file={config}",
            f"--storage.tsdb.path={os.path.join(self.dir, 'data')}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]),
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited with {self.proc.returncode}: "
                                     f"{self.log_text()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready",
                                            timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready after {timeout}s: {self.log_text()}")
            threading.Event().wait(0.2)  # an external process: poll with a deadline

    def log_text(self):
        try:
            with open(os.path.join(self.dir, "log.txt"), "rb") as f:
                return f.read()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def query(self, expr):
        """Instant query; returns the list of (labels, float value)."""
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?" +
               urllib.parse.urlencode({"query": expr}))
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise AssertionError(f"query {expr!r} failed: {body}")
        return [(item["metric"], float(item["value"][1])) for item in body["data"]["result"]]

    def scalar(self, expr):
        """The value of a query that yields one series (None if it yields none)."""
        result = self.query(expr)
        if not result:
            return None
        if len(result) != 1:
            raise AssertionError(f"{expr!r} gave {len(result)} series: {result}")
        return result[0][1]

    def wait_for(self, expr, predicate, timeout=60):
        """Polls until predicate(value) holds (scrapes come every second)."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.scalar(expr)
            if value is not None and predicate(value):
                return value
            threading.Event().wait(0.25)
        raise AssertionError(f"{expr!r} is {value} after {timeout}s")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log:
            self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
