"""Scale-out on loopback: two gemmserve processes behind Debian's nginx
(grpc_pass, round robin). A client's requests reach both (each server's
/metrics shows its share), and when one is stopped mid-run with SIGTERM no
request is lost: the stopping server answers new calls UNAVAILABLE while it
drains (the client's gRPC retry policy resends them, nginx picks the other
server), and once it is gone nginx's next-upstream rule skips it. The
client's retry policy is what a production client of a replicated,
idempotent inference service uses (docs/deployment.md)."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc
import numpy as np

from gemmserve_client import decode_outputs, make_infer_request, pb2_grpc
from gemmserve_testing.prometheus import free_port
from gemmserve_testing.server import ServerProcess, _with_parent_death_signal

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
RETRY_CONFIG = json.dumps({"methodConfig": [{
    "name": [{"service": "inference.GRPCInferenceService"}],
    # Inference is a pure function, so a retry is always safe. UNAVAILABLE is
    # what a draining server answers; CANCELLED is what gRPC 1.51 gives a call
    # that reached the stopping server after its drain, in the instant before
    # its listener closed (it never ran).
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.02s", "maxBackoff": "0.2s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE", "CANCELLED"]}}]})


def ok_count(metrics_url):
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("gemmserve_requests_total{") and 'code="OK"' in line and \
                'model="matmul"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


class NginxProcess:
    def __init__(self, upstream_ports):
        self.dir = tempfile.mkdtemp(prefix="gemmserve-nginx-")
        self.port = free_port()
        temp = {k: os.path.join(self.dir, k) for k in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
        servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=30s;"
                            for p in upstream_ports)
        config = f"""
worker_processes 1;
daemon off;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {temp['body']};
  proxy_temp_path {temp['proxy']};
  fastcgi_temp_path {temp['fastcgi']};
  uwsgi_temp_path {temp['uwsgi']};
  scgi_temp_path {temp['scgi']};
  client_max_body_size 64m;
  upstream gemmserve {{
{servers}
  }}
  server {{
    listen 127.0.0.1:{self.port} http2;
    location / {{
      grpc_pass grpc://gemmserve;
      grpc_next_upstream error timeout;
    }}
  }}
}}
"""
        self.config = os.path.join(self.dir, "nginx.conf")
        with open(self.config, "w") as f:
            f.write(config)
        self.proc = None

    def start(self):
        if not os.access(NGINX, os.X_OK):
            raise RuntimeError("nginx is not installed (scripts/install_deps.sh --test)")
        self.proc = subprocess.Popen(
            _with_parent_death_signal([NGINX, "-p", self.dir, "-c", self.config]),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


class ScaleOutTest(unittest.TestCase):
    def test_requests_reach_both_servers_and_none_is_lost_when_one_stops(self):
        servers = [ServerProcess("--shutdown_grace_seconds=30").start() for _ in range(2)]
        nginx = NginxProcess([s.port for s in servers]).start()
        self.addCleanup(nginx.stop)
        for s in servers:
            self.addCleanup(s.stop)
        channel = grpc.insecure_channel(f"127.0.0.1:{nginx.port}", options=[
            ("grpc.enable_retries", 1), ("grpc.service_config", RETRY_CONFIG)])
        self.addCleanup(channel.close)
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = pb2_grpc.GRPCInferenceServiceStub(channel)

        rng = np.random.default_rng(4)
        failures, answered = [], [0]
        lock = threading.Lock()
        stop_sending = threading.Event()
        halfway = threading.Event()

        def client(seed):
            local = np.random.default_rng(seed)
            while not stop_sending.is_set():
                a = local.integers(-8, 8, (int(local.integers(1, 64)), 32)).astype(np.float32)
                b = local.integers(-8, 8, (32, int(local.integers(1, 64)))).astype(np.float32)
                try:
                    y = decode_outputs(stub.ModelInfer(
                        make_infer_request("matmul", [("A", a), ("B", b)]), timeout=60))["Y"]
                    if not np.array_equal(y, a @ b):
                        raise AssertionError("wrong answer")
                except Exception as e:  # a lost request: any error at all
                    with lock:
                        failures.append(repr(e)[:300])
                with lock:
                    answered[0] += 1
                    if answered[0] >= 150:
                        halfway.set()

        threads = [threading.Thread(target=client, args=(int(rng.integers(1 << 30)),))
                   for _ in range(4)]
        for t in threads:
            t.start()
        try:
            self.assertTrue(halfway.wait(timeout=120), "no progress through nginx")
            shares = [ok_count(s.metrics_url) for s in servers]
            for i, share in enumerate(shares):
                self.assertGreater(share, 20, f"server {i} got {share} of ~150 requests: "
                                              "nginx is not balancing")
            # Stop server 0 under load; it drains and exits 0.
            servers[0].proc.send_signal(15)
            self.assertEqual(servers[0].proc.wait(timeout=60), 0)
            before = answered[0]
            deadline = time.monotonic() + 60
            while answered[0] < before + 150:  # keep going on the survivor
                self.assertLess(time.monotonic(), deadline, "no progress after the stop")
                threading.Event().wait(0.05)
        finally:
            stop_sending.set()
            for t in threads:
                t.join(timeout=60)
        self.assertEqual(failures, [], f"{len(failures)} of {answered[0]} requests lost")
        self.assertGreater(ok_count(servers[1].metrics_url), shares[1])


if __name__ == "__main__":
    unittest.main(verbosity=2)
