"""Client system shared memory (Triton's extension) through the real server:
regions made by this test process (a real client on the same host), inputs
read from them and outputs written into them, and the RELIABILITY rows of its
misuse (S1-S6): a window past the region, a region unregistered while a
request holds it, a region its owner shrank, another client's region name,
registration over the cap, inputs from regions beyond what the server may
hold; each followed by a valid request of each model (docs/reliability.md)."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import uuid

import grpc
import numpy as np

from gemmserve_client import decode_outputs, make_infer_request, pb2
from gemmserve_client import shared_memory as shm
from gemmserve_testing.base import GemmServeTestCase, serve_with_tokens
from gemmserve_testing.process import ProcessMemory, metric_sum, server_is_sanitized

CAP = 64 << 20


def new_key():
    return f"/gemmserve_it_{os.getpid()}_{uuid.uuid4().hex[:12]}"


class SharedMemoryCase(GemmServeTestCase):
    server_flags = ("--allow_client_shm", f"--max_client_shm_bytes={CAP}")

    def setUp(self):
        self.regions = []

    def tearDown(self):
        try:
            shm.unregister(self.stub, "")
        finally:
            for region in self.regions:
                region.close()

    def region(self, byte_size):
        region = shm.SharedMemoryRegion.create(new_key(), byte_size)
        self.regions.append(region)
        return region

    def code_of(self, call, *args, **kwargs):
        try:
            call(*args, **kwargs)
        except grpc.RpcError as error:
            return error.code(), error.details() or ""
        return grpc.StatusCode.OK, ""


class SharedMemoryTest(SharedMemoryCase):

    def test_matmul_inputs_and_output_through_shared_memory(self):
        rng = np.random.default_rng(1)
        # Primes, so that no dimension sits on a kernel's block edge.
        a = rng.standard_normal((37, 19)).astype(np.float32)
        b = rng.standard_normal((19, 23)).astype(np.float32)
        y_bytes = 37 * 23 * 4
        region = self.region(a.nbytes + b.nbytes + y_bytes + 100)
        region.write(a, 0)
        region.write(b, a.nbytes)
        shm.register(self.stub, "io", region)
        request = pb2.ModelInferRequest(model_name="matmul")
        shm.use_for_input(request, "A", a, "io", offset=0)
        shm.use_for_input(request, "B", b, "io", offset=a.nbytes)
        shm.use_for_output(request, "Y", "io", y_bytes + 100, offset=a.nbytes + b.nbytes)
        response = self.infer(request)
        # The output's bytes are in the region; the response pairs an empty
        # raw entry with it and says where they went.
        self.assertEqual(list(response.raw_output_contents), [b""])
        out = response.outputs[0]
        self.assertEqual(list(out.shape), [37, 23])
        self.assertEqual(out.parameters["shared_memory_region"].string_param, "io")
        self.assertEqual(out.parameters["shared_memory_byte_size"].int64_param, y_bytes)
        self.assertEqual(out.parameters["shared_memory_offset"].int64_param,
                         a.nbytes + b.nbytes)
        y = region.read(np.float32, (37, 23), offset=a.nbytes + b.nbytes)
        reference = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(y, reference, rtol=1e-5, atol=1e-5)

    def test_one_input_in_shared_memory_and_one_on_the_wire(self):
        rng = np.random.default_rng(2)
        a = rng.integers(-8, 8, size=(5, 7)).astype(np.float32)
        b = rng.integers(-8, 8, size=(7, 3)).astype(np.float32)
        region = self.region(a.nbytes)
        region.write(a)
        shm.register(self.stub, "a", region)
        # raw_input_contents pair with the inputs outside shared memory.
        request = make_infer_request("matmul", [("B", b)])
        shm.use_for_input(request, "A", a, "a")
        y = decode_outputs(self.infer(request))["Y"]
        np.testing.assert_array_equal(y, a @ b)

    def test_grouped_matmul_through_shared_memory(self):
        rng = np.random.default_rng(3)
        x = rng.standard_normal((11, 13)).astype(np.float32)
        w = rng.standard_normal((5, 13, 7)).astype(np.float32)
        idx = rng.integers(0, 5, size=(11, 2)).astype(np.int64)
        region = self.region(x.nbytes + w.nbytes + idx.nbytes)
        offsets = np.cumsum([0, x.nbytes, w.nbytes])
        for array, offset in zip((x, w, idx), offsets):
            region.write(array, int(offset))
        shm.register(self.stub, "moe", region)
        request = pb2.ModelInferRequest(model_name="grouped_matmul")
        for name, array, offset in zip(("input", "weights", "group_indices"), (x, w, idx),
                                       offsets):
            shm.use_for_input(request, name, array, "moe", offset=int(offset))
        out = decode_outputs(self.infer(request))["output"]
        reference = np.einsum("mk,mskn->msn", x.astype(np.float64), w.astype(np.float64)[idx])
        np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-5)

    def test_status_lists_the_callers_regions(self):
        region = self.region(4096)
        shm.register(self.stub, "first", region, offset=1024, byte_size=2048)
        shm.register(self.stub, "second", region)
        regions = shm.status(self.stub)
        self.assertEqual(sorted(regions), ["first", "second"])
        self.assertEqual((regions["first"].key, regions["first"].offset,
                          regions["first"].byte_size), (region.key, 1024, 2048))
        self.assertEqual(list(shm.status(self.stub, "second")), ["second"])
        code, _ = self.code_of(shm.status, self.stub, "third")
        self.assertEqual(code, grpc.StatusCode.NOT_FOUND)
        shm.unregister(self.stub, "first")
        self.assertEqual(list(shm.status(self.stub)), ["second"])

    def test_perf_sends_its_load_through_shared_memory(self):
        """gemmserve-cli perf --shared_memory system (the C++ client's helper): every call
        answered, the server's statistics count them, and its regions are unregistered and
        unlinked when it ends."""
        cli = os.path.join(os.path.dirname(os.environ["GEMMSERVE_BIN"]), "gemmserve-cli")
        out = os.path.join(tempfile.mkdtemp(prefix="gemmserve-perf-shm-"), "perf.json")
        self.addCleanup(shutil.rmtree, os.path.dirname(out), True)
        before = self.stub.ModelStatistics(pb2.ModelStatisticsRequest(name="matmul"),
                                           timeout=10).model_stats[0]
        run = subprocess.run([cli, f"--url={self.server.address}", "perf", "--model=matmul",
                              "--shape=A:64,96", "--shape=B:96,48", "--concurrency=2",
                              "--duration=0.5", "--warmup=0.1", "--timeout_ms=10000",
                              "--shared_memory=system", f"--json_out={out}"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(out) as f:
            report = json.load(f)
        self.assertGreater(report["ok"], 0)
        self.assertEqual(report["errors"], {})
        self.assertEqual(report["shared_memory"], "system")
        self.assertEqual(report["distinct_requests"], 1)
        self.assertIn("tensors in system shared memory", run.stdout)
        after = self.stub.ModelStatistics(pb2.ModelStatisticsRequest(name="matmul"),
                                          timeout=10).model_stats[0]
        # The load's calls, its warm-up's, and the one over the socket that sized the regions.
        self.assertGreaterEqual(after.inference_stats.success.count
                                - before.inference_stats.success.count, report["ok"] + 1)
        self.assertEqual(dict(shm.status(self.stub)), {})
        self.assertEqual([f for f in os.listdir("/dev/shm") if f.startswith("gemmserve-perf-")],
                         [])
        # --shared_memory takes none or system.
        bad = subprocess.run([cli, f"--url={self.server.address}", "perf", "--model=matmul",
                              "--shared_memory=cuda"], capture_output=True, text=True, timeout=60)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--shared_memory 'cuda'", bad.stderr)

    def test_registration_checks_its_fields(self):
        region = self.region(4096)
        for name, key, offset, size, code in [
                ("", region.key, 0, 16, grpc.StatusCode.INVALID_ARGUMENT),
                ("r", "no-slash", 0, 16, grpc.StatusCode.INVALID_ARGUMENT),
                ("r", "/a/b", 0, 16, grpc.StatusCode.INVALID_ARGUMENT),
                ("r", new_key(), 0, 16, grpc.StatusCode.NOT_FOUND),
                ("r", region.key, 0, 0, grpc.StatusCode.INVALID_ARGUMENT),
                ("r", region.key, 4000, 97, grpc.StatusCode.INVALID_ARGUMENT),
                ("r", region.key, 2**64 - 1, 2, grpc.StatusCode.INVALID_ARGUMENT)]:
            with self.subTest(name=name, key=key, offset=offset, size=size):
                got, details = self.code_of(
                    self.stub.SystemSharedMemoryRegister,
                    pb2.SystemSharedMemoryRegisterRequest(name=name, key=key, offset=offset,
                                                          byte_size=size), timeout=10)
                self.assertEqual(got, code, details)
        shm.register(self.stub, "r", region)
        code, _ = self.code_of(shm.register, self.stub, "r", region)
        self.assertEqual(code, grpc.StatusCode.ALREADY_EXISTS)

    def test_s1_windows_past_the_region_are_invalid(self):
        a = np.ones((4, 4), np.float32)
        b = np.ones((4, 4), np.float32)
        region = self.region(256)
        region.write(a)
        shm.register(self.stub, "small", region, byte_size=96)
        cases = []
        request = make_infer_request("matmul", [("B", b)])
        shm.use_for_input(request, "A", a, "small")  # 64 bytes at 0: inside
        tensor = request.inputs[-1]
        tensor.parameters["shared_memory_offset"].int64_param = 40  # 40 + 64 > 96
        cases.append((request, "pass its end"))
        request = make_infer_request("matmul", [("B", b)])
        shm.use_for_input(request, "A", a, "small")
        request.inputs[-1].parameters["shared_memory_offset"].uint64_param = 2**64 - 8
        cases.append((request, "pass its end"))
        request = make_infer_request("matmul", [("A", a), ("B", b)])
        shm.use_for_output(request, "Y", "small", 64, offset=64)  # 64 + 64 > 96
        cases.append((request, "pass its end"))
        request = make_infer_request("matmul", [("A", a), ("B", b)])
        shm.use_for_output(request, "Y", "small", 63)  # Y is 64 bytes
        cases.append((request, "over its shared_memory_byte_size"))
        request = make_infer_request("matmul", [("B", b)])
        shm.use_for_input(request, "A", a, "small")
        del request.inputs[-1].parameters["shared_memory_byte_size"]
        cases.append((request, "needs both"))
        for request, message in cases:
            with self.subTest(message=message):
                self.assert_rejected(request, grpc.StatusCode.INVALID_ARGUMENT, message)
        self.assertEqual(region.read(np.float32, (4, 4)).tolist(), a.tolist(),
                         "a refused output wrote nothing")

    def test_s3_a_region_its_owner_shrank_is_refused_without_a_crash(self):
        a = np.ones((64, 64), np.float32)
        b = np.ones((64, 64), np.float32)
        region = self.region(2 * a.nbytes)
        region.write(a)
        shm.register(self.stub, "shrinks", region)
        region.truncate(100)
        request = make_infer_request("matmul", [("B", b)])
        shm.use_for_input(request, "A", a, "shrinks")
        self.assert_rejected(request, grpc.StatusCode.INVALID_ARGUMENT, "truncated")
        request = make_infer_request("matmul", [("A", a), ("B", b)])
        shm.use_for_output(request, "Y", "shrinks", a.nbytes, offset=a.nbytes)
        self.assert_rejected(request, grpc.StatusCode.INVALID_ARGUMENT, "truncated")
        region.truncate(0)
        request = make_infer_request("matmul", [("B", b)])
        shm.use_for_input(request, "A", a, "shrinks")
        self.assert_rejected(request, grpc.StatusCode.INVALID_ARGUMENT, "truncated")

    def test_s5_registration_over_the_cap_is_resource_exhausted(self):
        region = self.region(CAP)
        shm.register(self.stub, "most", region, byte_size=CAP - 4096)
        code, details = self.code_of(shm.register, self.stub, "more", region, byte_size=8192)
        self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("--max_client_shm_bytes", details)
        shm.register(self.stub, "rest", region, byte_size=4096)  # exactly at the cap
        shm.unregister(self.stub, "most")
        shm.register(self.stub, "more", region, byte_size=8192)
        self.assert_server_still_serves()

    def test_unknown_region_in_a_request_is_invalid(self):
        request = make_infer_request("matmul", [("B", np.ones((2, 2), np.float32))])
        shm.use_for_input(request, "A", np.ones((2, 2), np.float32), "never-registered")
        self.assert_rejected(request, grpc.StatusCode.INVALID_ARGUMENT,
                             "unknown shared memory region")

    def test_http_routes_register_list_and_unregister(self):
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        b = np.ones((3, 2), np.float32)
        region = self.region(4096)
        region.write(a)
        base = "/v2/systemsharedmemory"
        self.assertEqual(self.http("POST", f"{base}/region/web/register",
                                   {"key": region.key, "offset": 0, "byte_size": 24}), (200, {}))
        status, listed = self.http("GET", f"{base}/status")
        self.assertEqual((status, listed),
                         (200, [{"name": "web", "key": region.key, "offset": 0,
                                 "byte_size": 24}]))
        self.assertEqual(self.http("GET", f"{base}/region/web/status")[1], listed)
        _, metadata = self.http("GET", "/v2")
        self.assertIn("system_shared_memory", metadata["extensions"])
        # A region registered over HTTP serves a gRPC request: one registry.
        request = make_infer_request("matmul", [("B", b)])
        shm.use_for_input(request, "A", a, "web")
        np.testing.assert_array_equal(decode_outputs(self.infer(request))["Y"], a @ b)
        for path, body, code in [
                (f"{base}/region/web/register", {"key": region.key, "byte_size": 24}, 409),
                (f"{base}/region/x/register", {"key": region.key}, 400),
                (f"{base}/region/x/register", {"key": region.key, "byte_size": -1}, 400),
                (f"{base}/region/x/register", {"key": region.key, "byte_size": 8,
                                               "extra": 1}, 400),
                (f"{base}/region/x/register", {"key": "/a/b", "byte_size": 8}, 400),
                (f"{base}/region/x/register", {"key": region.key, "byte_size": CAP + 1}, 413),
                (f"{base}/region/x/unregister", None, 404),
                ("/v2/cudasharedmemory/region/x/register", {}, 501)]:
            with self.subTest(path=path, body=body):
                status, answer = self.http("POST", path, body)
                self.assertEqual(status, code, answer)
                self.assertTrue(answer["error"])
        self.assertEqual(self.http("GET", f"{base}/region/x/status")[0], 404)
        self.assertEqual(self.http("POST", f"{base}/region/web/unregister"), (200, {}))
        self.assertEqual(self.http("GET", f"{base}/status"), (200, []))

    def test_http_inference_through_shared_memory(self):
        """Inference bodies over HTTP carry the same parameters: an input read from a
        region, an output written to one (answered with its window, no data), the other
        input as JSON numbers; then the S1 rows over HTTP."""
        rng = np.random.default_rng(31)
        a = rng.standard_normal((5, 7)).astype(np.float32)
        b = rng.standard_normal((7, 3)).astype(np.float32)
        y_bytes = 5 * 3 * 4
        region = self.region(a.nbytes + y_bytes)
        region.write(a)
        shm.register(self.stub, "http_io", region)

        def body(a_params, y_params):
            return {"inputs": [{"name": "A", "shape": [5, 7], "datatype": "FP32",
                                "parameters": a_params},
                               {"name": "B", "shape": [7, 3], "datatype": "FP32",
                                "data": b.ravel().tolist()}],
                    "outputs": [{"name": "Y", "parameters": y_params}]}

        a_params = {"shared_memory_region": "http_io", "shared_memory_byte_size": a.nbytes}
        y_params = {"shared_memory_region": "http_io", "shared_memory_byte_size": y_bytes,
                    "shared_memory_offset": a.nbytes}
        status, answer = self.http("POST", "/v2/models/matmul/infer", body(a_params, y_params))
        self.assertEqual(status, 200, answer)
        out = answer["outputs"][0]
        self.assertEqual((out["name"], out["shape"], out["parameters"]), ("Y", [5, 3], y_params))
        self.assertNotIn("data", out)
        want = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(region.read(np.float32, (5, 3), offset=a.nbytes), want,
                                   rtol=1e-5, atol=1e-5)
        for a_p, y_p, code, text in [
                ({**a_params, "shared_memory_offset": y_bytes + 1}, y_params, 400,
                 "pass its end"),
                (a_params, {**y_params, "shared_memory_byte_size": 8}, 400, "Y"),
                ({"shared_memory_region": "http_io"}, y_params, 400,
                 "needs both shared_memory_region and shared_memory_byte_size"),
                ({**a_params, "shared_memory_region": "nope"}, y_params, 400, "nope")]:
            with self.subTest(a=a_p, y=y_p):
                status, answer = self.http("POST", "/v2/models/matmul/infer", body(a_p, y_p))
                self.assertEqual(status, code, answer)
                self.assertIn(text, answer["error"])
        self.assert_server_still_serves()

    def test_cuda_shared_memory_is_unimplemented(self):
        code, _ = self.code_of(self.stub.CudaSharedMemoryRegister,
                               pb2.CudaSharedMemoryRegisterRequest(name="g"), timeout=10)
        self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED)


class SharedMemoryOffTest(SharedMemoryCase):
    server_flags = ()

    def tearDown(self):
        for region in self.regions:
            region.close()

    def test_off_by_default(self):
        region = self.region(64)
        code, details = self.code_of(shm.register, self.stub, "r", region)
        self.assertEqual(code, grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn("--allow_client_shm", details)
        request = make_infer_request("matmul", [("B", np.ones((2, 2), np.float32))])
        shm.use_for_input(request, "A", np.ones((2, 2), np.float32), "r")
        self.assert_rejected(request, grpc.StatusCode.PERMISSION_DENIED, "--allow_client_shm")


class SharedMemoryInUseTest(SharedMemoryCase):
    """S2: a request holds its region from the moment it is accepted (it is
    counted in flight just before) until it is answered. A large FP64 MatMul
    sent first keeps the built-in model's one batch busy, so the request
    behind it is in flight for a while."""

    def inflight(self):
        return metric_sum(self.server.metrics_url, "gemmserve_inflight_requests")

    def wait_inflight(self, count, futures):
        deadline = time.monotonic() + 60
        while self.inflight() < count:
            for f in futures:
                self.assertFalse(f.done() and f.exception() is not None,
                                 f"a request failed: {f.exception() if f.done() else ''}")
            self.assertLess(time.monotonic(), deadline, "the requests never arrived")
            time.sleep(0.002)

    def test_s2_unregistering_a_region_in_use_fails_and_the_request_completes(self):
        rng = np.random.default_rng(4)
        big = rng.standard_normal((2048, 2048))
        blocker = self.stub.ModelInfer.future(
            make_infer_request("matmul", [("A", big), ("B", big)]), timeout=120)
        a = rng.integers(-8, 8, size=(6, 5)).astype(np.float32)
        b = rng.integers(-8, 8, size=(5, 4)).astype(np.float32)
        region = self.region(a.nbytes + 6 * 4 * 4)
        region.write(a)
        shm.register(self.stub, "held", region)
        request = make_infer_request("matmul", [("B", b)])
        shm.use_for_input(request, "A", a, "held")
        shm.use_for_output(request, "Y", "held", 6 * 4 * 4, offset=a.nbytes)
        self.wait_inflight(1, [blocker])
        future = self.stub.ModelInfer.future(request, timeout=120)
        self.wait_inflight(2, [blocker, future])
        code, details = self.code_of(shm.unregister, self.stub, "held")
        self.assertFalse(future.done(), "the blocker was too short for this test")
        self.assertEqual(code, grpc.StatusCode.UNAVAILABLE, details)
        self.assertIn("in use", details)
        code, _ = self.code_of(shm.unregister, self.stub, "")
        self.assertEqual(code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("held", shm.status(self.stub))
        future.result()
        blocker.result()
        np.testing.assert_array_equal(region.read(np.float32, (6, 4), offset=a.nbytes), a @ b)
        shm.unregister(self.stub, "held")
        self.assertEqual(shm.status(self.stub), {})


class SharedMemoryBudgetTest(SharedMemoryCase):
    """S6: the server copies a request's inputs out of their regions (so that their
    owner cannot change them under the computation). Those copies are counted
    against --max_inflight_bytes before they are allocated: many callers at
    once cannot make the server allocate more than it would accept, and a
    request refused for room gets the same answer as one on the socket."""

    LIMIT = 256 << 20
    server_flags = ("--allow_client_shm", f"--max_client_shm_bytes={2 * (256 << 20)}",
                    f"--max_inflight_bytes={256 << 20}")

    def inflight_bytes(self):
        return metric_sum(self.server.metrics_url, "gemmserve_inflight_bytes")

    def settled_inflight_bytes(self, timeout=10.0):
        """The gauge once the last answer's bytes are released: gRPC holds them until it
        is done sending (the reactor's OnDone), a moment after the client has the answer."""
        deadline = time.monotonic() + timeout
        while (held := self.inflight_bytes()) != 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        return held

    def shm_matmul(self, rows, region_name):
        """A (rows, 1024) FP32 input in the region (its 4 KiB rows zero unless written),
        B (1024, 1) on the wire."""
        a = np.broadcast_to(np.float32(0), (rows, 1024))  # its shape: the bytes are the region's
        request = make_infer_request("matmul", [("B", np.ones((1024, 1), np.float32))])
        shm.use_for_input(request, "A", a, region_name)
        return request

    def test_s6_inputs_over_the_limit_are_refused_before_their_copy(self):
        rows = (self.LIMIT >> 12) + 16  # 64 KiB over the limit on its own
        region = self.region(rows * 4096)
        shm.register(self.stub, "huge", region)
        memory = ProcessMemory(self.server.proc.pid)
        memory.reset_peak()
        self.assert_rejected(self.shm_matmul(rows, "huge"), grpc.StatusCode.RESOURCE_EXHAUSTED,
                             ("shared memory inputs would hold", "--max_inflight_bytes"),
                             before_admission=True)
        if not server_is_sanitized():
            # The copy would have been 256 MiB, every page of it touched by the read.
            self.assertLess(memory.peak_growth(), 64 << 20, "the inputs were copied first")
        self.assertEqual(self.settled_inflight_bytes(), 0)

    def test_s6_a_full_server_refuses_shm_inputs_as_queue_full_and_serves_them_once_free(self):
        # The region is ready before the server is made full: what follows the
        # blocker's arrival must fit in its computation (a third of a second here).
        region = self.region(self.LIMIT)
        region.write(np.ones((self.LIMIT >> 12, 1024), np.float32))
        shm.register(self.stub, "later", region)
        rng = np.random.default_rng(9)
        big = rng.standard_normal((2048, 2048))
        blocker_request = make_infer_request("matmul", [("A", big), ("B", big)])

        def attempt():
            """True once it decided while the blocker ran; the request it was refused."""
            admitted_before = self.admitted_bytes()
            blocker = self.stub.ModelInfer.future(blocker_request, timeout=120)
            deadline = time.monotonic() + 60
            # Admitted, so counted at its whole cost (its message is counted from
            # before its parse, a moment earlier).
            while self.admitted_bytes() == admitted_before:
                if blocker.done():  # (exception() would wait for it)
                    self.assertIsNone(blocker.exception())
                    return False, None  # ended between two scrapes
                self.assertLess(time.monotonic(), deadline, "the blocker never arrived")
                time.sleep(0.002)
            held = int(self.inflight_bytes())
            if held == 0:
                return False, None  # answered between two scrapes
            self.assertLess(held, self.LIMIT)
            # Room for the inputs alone, not beside what the blocker holds.
            rows = ((self.LIMIT - held) >> 12) + 16
            request = self.shm_matmul(rows, "later")
            before = self.admitted_bytes()
            code, details = self.code_of(self.stub.ModelInfer, request, timeout=60)
            # A region that is not the caller's is refused as such, full server or not.
            other_code, other_details = self.code_of(
                self.stub.ModelInfer, self.shm_matmul(4, "nobody's"), timeout=60)
            admitted = self.admitted_bytes()
            conclusive = not blocker.done()
            blocker.result()
            if not conclusive:
                return False, None
            self.assertEqual(code, grpc.StatusCode.UNAVAILABLE, details)
            self.assertIn("shared memory inputs would add", details)
            self.assertIn("retry later", details)
            self.assertEqual(admitted, before, "the refused request was accepted")
            self.assertEqual(other_code, grpc.StatusCode.INVALID_ARGUMENT, other_details)
            return True, (request, rows)

        for _ in range(5):
            decided, refused = attempt()
            if decided:
                break
        else:
            self.fail("the blocker ended before the scenario decided, 5 times")
        self.assertGreater(metric_sum(self.server.metrics_url, "gemmserve_rejected_total",
                                      reason="queue_full"), 0)
        # Retried once the blocker is answered, the same request is served.
        deadline = time.monotonic() + 60
        while self.inflight_bytes() != 0:
            self.assertLess(time.monotonic(), deadline, "the blocker's bytes were not released")
            time.sleep(0.01)
        request, rows = refused
        y = decode_outputs(self.infer(request, timeout=120))["Y"]
        np.testing.assert_array_equal(y, np.full((rows, 1), 1024, np.float32))
        self.assertEqual(self.settled_inflight_bytes(), 0)
        self.assert_server_still_serves()


class SharedMemoryOwnersTest(unittest.TestCase):
    """S4: with tokens, a region belongs to the credentials that registered it."""

    @classmethod
    def setUpClass(cls):
        serve_with_tokens(cls, "alice-token-0123456789\nbob-token-0123456789\n",
                          "--allow_client_shm")

    ALICE = (("authorization", "Bearer alice-token-0123456789"),)
    BOB = (("authorization", "Bearer bob-token-0123456789"),)

    def test_s4_another_clients_region_name_is_unknown(self):
        a = np.full((3, 3), 2, np.float32)
        b = np.eye(3, dtype=np.float32)
        with shm.SharedMemoryRegion.create(new_key(), 1024) as region:
            region.write(a)
            shm.register(self.stub, "mine", region, metadata=self.ALICE)
            try:
                request = make_infer_request("matmul", [("B", b)])
                shm.use_for_input(request, "A", a, "mine")
                with self.assertRaises(grpc.RpcError) as caught:
                    self.stub.ModelInfer(request, timeout=30, metadata=self.BOB)
                self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn("unknown shared memory region", caught.exception.details())
                # Bob can neither see, unregister nor overwrite it...
                self.assertEqual(shm.status(self.stub, metadata=self.BOB), {})
                with self.assertRaises(grpc.RpcError) as caught:
                    shm.unregister(self.stub, "mine", metadata=self.BOB)
                self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)
                output = make_infer_request("matmul", [("A", a), ("B", b)])
                shm.use_for_output(output, "Y", "mine", 36)
                with self.assertRaises(grpc.RpcError):
                    self.stub.ModelInfer(output, timeout=30, metadata=self.BOB)
                self.assertEqual(region.read(np.float32, (3, 3)).tolist(), a.tolist())
                # ...and Alice's request reads her region.
                response = self.stub.ModelInfer(request, timeout=30, metadata=self.ALICE)
                np.testing.assert_array_equal(decode_outputs(response)["Y"], a @ b)
                # Without credentials there is no call at all.
                with self.assertRaises(grpc.RpcError) as caught:
                    shm.status(self.stub)
                self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
            finally:
                shm.unregister(self.stub, "", metadata=self.ALICE)
        self.server.assert_alive()


if __name__ == "__main__":
    unittest.main()
