#!/usr/bin/python3
"""HTTP/REST front end against gRPC, on one server in one run.

    scripts/http_benchmark.py --build build [--duration 2] [--repetitions 5]

1. Writes a model repository with the resident `olmoe` layer (GroupedMatMul,
   BF16, K 2048, N 1024, 64 experts, top-8; scripts/make_model_repository.py
   --olmoe bf16), starts gemmserve on it with gRPC and HTTP on loopback, and
   sends decode-size requests (1 and 16 tokens) closed-loop at concurrency 1
   (latency) and 4 (throughput) over three transports:
     grpc         ModelInfer with the tensors in raw_input_contents;
     http binary  POST .../infer with Triton's binary tensor extension, binary
                  outputs (binary_data_output);
     http json    the same request with every tensor as JSON numbers, JSON
                  numbers back (what curl or a browser sends).
   Each transport's client does the least it can, so that the ratio is the
   server's: requests are encoded before the run (a pool of 16 distinct ones,
   fresh values and routing each), gRPC sends pre-serialized bytes through
   grpcio with no (de)serializer, HTTP writes pre-built request bytes to a
   kept-alive socket and reads the answer's bytes without parsing them; each
   caller thread has its own connection. The transports take turns inside
   each repetition (grpc, binary, json, then the next repetition starting one
   later), so all three see the same machine; figures are medians over the
   repetitions, and each ratio is the median of the per-repetition ratios.
2. Runs gemmserve-http-bench: JSON decoding (and encoding) of the same
   requests on one core, as MB of JSON text per second.

Targets (issue 16): HTTP binary p50 within 1.3x of gRPC p50; JSON decoding at
least 200 MB/s per core. Writes JSON (--json) and the "HTTP" section of
docs/performance.md (between the http-benchmark markers) with a plot,
docs/http-benchmark.png.
"""
import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(ROOT, "client", "python")]
import doc_sections  # noqa: E402

SECTION = "http-benchmark"
BEGIN, END = doc_sections.markers(SECTION)
TRANSPORTS = ("grpc", "http binary", "http json")
POOL = 16
HIDDEN, EXPERTS, TOP_K = 2048, 64, 8


def start_server(server, repo, compute_threads, extra_flags=()):
    proc = subprocess.Popen([server, "--grpc_port=0", "--metrics_port=0", "--http_port=0",
                             "--host=127.0.0.1", f"--compute_threads={compute_threads}",
                             f"--model_repository={repo}", *extra_flags],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ports = {}
    for key, pattern in (("grpc", r"gemmserve listening on \S+:(\d+)"),
                         ("metrics", r"gemmserve metrics on \S+:(\d+)"),
                         ("http", r"gemmserve http on \S+:(\d+)")):
        line = proc.stdout.readline()
        match = re.match(pattern, line)
        if not match:
            proc.kill()
            raise RuntimeError(f"gemmserve: expected '{pattern}', got {line!r}")
        ports[key] = int(match.group(1))
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, ports


def make_pool(tokens, seed):
    """POOL distinct olmoe requests: BF16 tokens (uint16 bit patterns) and top-8
    routing without repeats, as (inputs for the clients)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(POOL):
        values = rng.standard_normal((tokens, HIDDEN)).astype(np.float32)
        bits = (values.view(np.uint32) >> 16).astype(np.uint16)
        routing = np.stack([rng.choice(EXPERTS, TOP_K, replace=False)
                            for _ in range(tokens)]).astype(np.int64)
        pool.append([("tokens", bits, "BF16"), ("routing", routing)])
    return pool


def grpc_payloads(pool):
    from gemmserve_client import make_infer_request
    return [make_infer_request("olmoe", inputs).SerializeToString() for inputs in pool]


def http_payloads(pool, binary, port):
    from gemmserve_client.http import encode_infer_request
    out = []
    for inputs in pool:
        body, header_length = encode_infer_request(inputs, binary=binary)
        head = (f"POST /v2/models/olmoe/infer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Content-Length: {len(body)}\r\n")
        if header_length is not None:
            head += (f"Inference-Header-Content-Length: {header_length}\r\n"
                     "Content-Type: application/octet-stream\r\n")
        else:
            head += "Content-Type: application/json\r\n"
        out.append((head + "\r\n").encode() + body)
    return out


class HttpCaller:
    """One kept-alive connection; returns after the whole answer is read."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def __call__(self, request):
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"HTTP answer {head[:200]!r}: {rest[:300]!r}")
        length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
        while len(rest) < length:
            rest += self._recv()
        self.buffer = rest[length:]

    def _recv(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("the server closed the connection")
        return chunk

    def close(self):
        self.sock.close()


class GrpcCaller:
    """Its own channel (and so its own connection); bytes in, bytes out."""

    def __init__(self, port):
        import grpc
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1),
                                          ("grpc.max_receive_message_length", 1 << 30),
                                          ("grpc.max_send_message_length", 1 << 30)])
        self.call = self.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")

    def __call__(self, request):
        self.call(request, timeout=60)

    def close(self):
        self.channel.close()


def closed_loop(make_caller, payloads, concurrency, duration, warmup):
    """Latencies (s) of calls that ended inside the window, and calls/s."""
    callers = [make_caller() for _ in range(concurrency)]
    for caller in callers:  # connect and warm each connection
        caller(payloads[0])
    start = time.perf_counter() + warmup
    end = start + duration
    latencies = [[] for _ in callers]
    errors = []

    def run(i):
        caller, mine, n = callers[i], latencies[i], i
        try:
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    return
                caller(payloads[n % len(payloads)])
                t1 = time.perf_counter()
                n += concurrency
                if start <= t0 and t1 < end:
                    mine.append(t1 - t0)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for caller in callers:
        caller.close()
    if errors:
        raise errors[0]
    flat = sorted(x for mine in latencies for x in mine)
    if not flat:
        raise RuntimeError("no call completed inside the measurement window")
    return {"p50_us": 1e6 * flat[len(flat) // 2], "p99_us": 1e6 * flat[int(len(flat) * 0.99)],
            "throughput": len(flat) / duration, "calls": len(flat)}


def json_bench(binary, repetitions):
    out = subprocess.run([binary, f"--benchmark_repetitions={repetitions}",
                          "--benchmark_report_aggregates_only=true", "--benchmark_format=json",
                          "--benchmark_filter=/16$"],
                         check=True, capture_output=True, text=True, timeout=600).stdout
    results = {}
    for b in json.loads(out)["benchmarks"]:
        # The median of the repetitions; with one repetition there is no
        # aggregate, only the run itself.
        if b.get("aggregate_name") == "median" or (repetitions == 1 and
                                                   b.get("run_type") == "iteration"):
            name = b["run_name"]  # BM_DecodeJson/bf16/16
            results[name] = {"mb_per_s": b["bytes_per_second"] / 1e6,
                             "json_bytes": b.get("json_bytes", 0), "us": b["real_time"]}
    if not results:
        raise RuntimeError(f"{binary} reported no results:\n{out[:2000]}")
    return results


def render(results):
    lines = [BEGIN, "## HTTP/REST against gRPC", "",
             f"Generated by `scripts/http_benchmark.py` ({results['date']}): one gemmserve "
             f"({results['compute_threads']} compute threads, {results['cpu']}), the resident "
             "`olmoe` layer (GroupedMatMul, BF16, K 2048, N 1024, 64 experts, top-8), "
             "decode-size requests over gRPC, over HTTP with Triton's binary tensor extension, "
             "and over HTTP with every tensor as JSON numbers both ways. Closed loop, "
             f"{results['duration_s']} s per case after {results['warmup_s']} s of warm-up, "
             f"{results['repetitions']} repetitions with the transports taking turns; medians "
             "over the repetitions, ratios are medians of the per-repetition ratios to gRPC.",
             "",
             "| tokens | concurrency | transport | request bytes | p50 (us) | p99 (us) | "
             "requests/s | p50 / gRPC | requests/s / gRPC |",
             "|---|---|---|---|---|---|---|---|---|"]
    for case in results["cases"]:
        for name in TRANSPORTS:
            t = case["transports"][name]
            lines.append(
                f"| {case['tokens']} | {case['concurrency']} | {name} | {t['request_bytes']} | "
                f"{t['p50_us']:.0f} | {t['p99_us']:.0f} | {t['throughput']:.0f} | "
                f"{t['p50_ratio']:.2f}x | {t['throughput_ratio']:.2f}x |")
    lines += ["", "JSON on one core (`gemmserve-http-bench`, median of "
              f"{results['repetitions']}):", "",
              "| case | JSON bytes | time (us) | MB/s |", "|---|---|---|---|"]
    for name, r in sorted(results["json"].items()):
        lines.append(f"| {name} | {r['json_bytes']:.0f} | {r['us']:.0f} | {r['mb_per_s']:.0f} |")
    lines += ["", "| target | measured | required | |", "|---|---|---|---|"]
    for t in results["targets"]:
        lines.append(f"| {t['what']} | {t['measured']} | {t['required']} | "
                     f"{'pass' if t['pass'] else 'FAIL'} |")
    lines += ["", "![HTTP against gRPC](http-benchmark.png)", "",
              "Reproduce: `scripts/http_benchmark.py --build build` (about 2 minutes).", ""]
    return doc_sections.finish(lines, SECTION, results.get("note"))


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    labels = [f"{c['tokens']} tok, c{c['concurrency']}" for c in results["cases"]]
    width = 0.27
    for ax, key, title in ((axes[0], "p50_ratio", "p50 latency / gRPC (lower is better)"),
                           (axes[1], "throughput_ratio", "requests/s / gRPC (higher is better)")):
        for j, name in enumerate(TRANSPORTS):
            values = [c["transports"][name][key] for c in results["cases"]]
            ax.bar([i + (j - 1) * width for i in range(len(labels))], values, width, label=name)
        ax.axhline(1.0, color="black", linewidth=0.8)
        if key == "p50_ratio":
            ax.axhline(1.3, color="red", linestyle="--", linewidth=0.8, label="binary target")
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--compute_threads", type=int, default=os.cpu_count())
    parser.add_argument("--server_flag", action="append", default=[],
                        help="an extra flag for gemmserve (repeatable), e.g. --http_threads=1")
    parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "http-benchmark.png"))
    doc_sections.add_arguments(parser, ROOT)
    args = parser.parse_args()
    if doc_sections.rerender(args, SECTION, render):
        return 0
    sys.path.insert(0, os.path.join(args.build, "python"))
    server = os.path.join(args.build, "bin", "gemmserve")
    repo = tempfile.mkdtemp(prefix="gemmserve-http-bench-")
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu,
               "duration_s": args.duration, "warmup_s": args.warmup,
               "repetitions": args.repetitions, "compute_threads": args.compute_threads,
               "server_flags": args.server_flag,
               "cases": [], "targets": []}
    try:
        subprocess.run([sys.executable, os.path.join(HERE, "make_model_repository.py"), repo,
                        "--olmoe", "bf16"], check=True, stdout=subprocess.DEVNULL)
        proc, ports = start_server(server, repo, args.compute_threads, args.server_flag)
        try:
            for tokens in (1, 16):
                pool = make_pool(tokens, seed=tokens)
                payloads = {"grpc": grpc_payloads(pool),
                            "http binary": http_payloads(pool, True, ports["http"]),
                            "http json": http_payloads(pool, False, ports["http"])}
                callers = {"grpc": lambda: GrpcCaller(ports["grpc"]),
                           "http binary": lambda: HttpCaller(ports["http"]),
                           "http json": lambda: HttpCaller(ports["http"])}
                for concurrency in (1, 4):
                    runs = {name: [] for name in TRANSPORTS}
                    for rep in range(args.repetitions):
                        order = TRANSPORTS[rep % 3:] + TRANSPORTS[:rep % 3]
                        for name in order:
                            runs[name].append(closed_loop(callers[name], payloads[name],
                                                          concurrency, args.duration,
                                                          args.warmup))
                    case = {"tokens": tokens, "concurrency": concurrency, "transports": {}}
                    for name in TRANSPORTS:
                        mine, base = runs[name], runs["grpc"]
                        case["transports"][name] = {
                            "request_bytes": len(payloads[name][0]),
                            "p50_us": statistics.median(r["p50_us"] for r in mine),
                            "p99_us": statistics.median(r["p99_us"] for r in mine),
                            "throughput": statistics.median(r["throughput"] for r in mine),
                            "p50_ratio": statistics.median(
                                m["p50_us"] / b["p50_us"] for m, b in zip(mine, base)),
                            "throughput_ratio": statistics.median(
                                m["throughput"] / b["throughput"] for m, b in zip(mine, base)),
                            "runs": mine}
                        t = case["transports"][name]
                        print(f"{tokens} tokens, concurrency {concurrency}, {name}: p50 "
                              f"{t['p50_us']:.0f} us ({t['p50_ratio']:.2f}x gRPC), "
                              f"{t['throughput']:.0f} req/s ({t['throughput_ratio']:.2f}x)",
                              flush=True)
                    results["cases"].append(case)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        results["json"] = json_bench(os.path.join(args.build, "bin", "gemmserve-http-bench"),
                                     args.repetitions)
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    for case in results["cases"]:
        if case["concurrency"] == 1:
            ratio = case["transports"]["http binary"]["p50_ratio"]
            results["targets"].append({
                "what": f"{case['tokens']}-token request, concurrency 1: HTTP binary p50 / "
                        "gRPC p50", "measured": f"{ratio:.2f}x", "required": "<= 1.3x",
                "pass": ratio <= 1.3})
    for name, r in sorted(results["json"].items()):
        if name.startswith("BM_DecodeJson"):
            results["targets"].append({
                "what": f"JSON decoding, one core ({name.split('/', 1)[1]})",
                "measured": f"{r['mb_per_s']:.0f} MB/s", "required": ">= 200 MB/s",
                "pass": r["mb_per_s"] >= 200})
    results["note"] = args.note
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)
    doc_sections.write_section(args.doc, SECTION, render(results))
    for t in results["targets"]:
        print(f"{'PASS' if t['pass'] else 'FAIL'}  {t['what']}: {t['measured']} ({t['required']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
