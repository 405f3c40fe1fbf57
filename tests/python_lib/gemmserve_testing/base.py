"""unittest base class: one real gemmserve process per test class, a channel to
it, and the helpers every suite shares (infer, assert_rejected)."""
import itertools
import json
import unittest
import urllib.error
import urllib.request

import grpc
import numpy as np

from gemmserve_client import decode_outputs, make_infer_request, pb2, pb2_grpc

from .process import metric_sum
from .server import ServerProcess

# Far above anything the tests send: the server's limits are what is under test.
CHANNEL_OPTIONS = [("grpc.max_send_message_length", 2**31 - 1),
                   ("grpc.max_receive_message_length", 2**31 - 1)]


def open_channel(address, timeout=10.0):
    channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    grpc.channel_ready_future(channel).result(timeout=timeout)
    return channel


def serve_with_tokens(cls, token_file_text, *flags):
    """For a test class's setUpClass: writes `token_file_text` as the token file, starts a
    server with --auth_token_file and `flags`, and sets cls.dir, cls.server, cls.channel
    and cls.stub, each cleaned up with the class."""
    import os
    import shutil
    import tempfile
    cls.dir = tempfile.mkdtemp(prefix="gemmserve-tokens-")
    cls.addClassCleanup(shutil.rmtree, cls.dir, True)
    path = os.path.join(cls.dir, "tokens")
    with open(path, "w") as f:
        f.write(token_file_text)
    cls.server = ServerProcess(f"--auth_token_file={path}", *flags).start()
    cls.addClassCleanup(cls.server.stop)
    cls.channel = open_channel(cls.server.address)
    cls.addClassCleanup(cls.channel.close)
    cls.stub = pb2_grpc.GRPCInferenceServiceStub(cls.channel)


class GemmServeTestCase(unittest.TestCase):
    server_flags = ()
    server_env = None  # extra environment variables of the server
    compute_threads = 2
    _good_seed = itertools.count(1)

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess(*cls.server_flags, compute_threads=cls.compute_threads,
                                   env=cls.server_env)
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)
        cls.channel = open_channel(cls.server.address)
        cls.addClassCleanup(cls.channel.close)
        cls.stub = pb2_grpc.GRPCInferenceServiceStub(cls.channel)

    # ------------------------------------------------------------ inference

    def infer(self, request, timeout=60.0):
        """ModelInfer that must succeed; a failure names the status and the server's state."""
        try:
            return self.stub.ModelInfer(request, timeout=timeout)
        except grpc.RpcError as error:
            died = self.server.proc.poll()
            state = (f"; the server died with code {died}:\n{self.server.stderr_text()}"
                     if died is not None else "")
            raise AssertionError(f"ModelInfer failed: {error.code().name}: "
                                 f"{error.details()}{state}") from None

    def infer_outputs(self, model, inputs, outputs=None, typed=False, timeout=60.0):
        """Sends numpy inputs (see make_infer_request); returns {output name: array}."""
        request = make_infer_request(model, inputs, outputs, typed=typed)
        return decode_outputs(self.infer(request, timeout=timeout))

    def rpc_error(self, call, request, timeout=30.0):
        """Calls `call(request)`, expecting it to fail; returns the grpc.RpcError."""
        try:
            call(request, timeout=timeout)
        except grpc.RpcError as error:
            return error
        self.fail("the call succeeded but should have failed")

    # ----------------------------------------------------------- rejection

    def assert_rejected(self, request, code, details_contains=(), before_admission=False,
                        timeout=30.0):
        """The server answers `request` with status `code`, stays up, and then still answers
        fresh valid MatMul and GroupedMatMul requests correctly. `before_admission`: the
        refusal came before the request was accepted (so before anything was allocated for
        it): nothing was counted against --max_inflight_bytes for it."""
        counted = self.admitted_bytes() if before_admission else None
        error = self.rpc_error(self.stub.ModelInfer, request, timeout=timeout)
        if before_admission:
            self.assertEqual(self.admitted_bytes(), counted, "the request was accepted first")
        self.server.assert_alive()  # a crash shows the server's stderr, not just UNAVAILABLE
        self.assertEqual(error.code(), code,
                         f"expected {code.name}, got {error.code().name}: {error.details()}")
        details = error.details() or ""
        self.assertTrue(details.strip(), "a rejection must say why")
        # Messages are capped at about 1 KiB and never echo tensor data.
        self.assertLessEqual(len(details), 2048, f"message not capped: {details[:200]}...")
        for text in ([details_contains] if isinstance(details_contains, str)
                     else details_contains):
            self.assertIn(text, details)
        self.assert_server_still_serves()
        return error

    def admitted_bytes(self):
        """What every request accepted so far was counted at (gemmserve_admitted_bytes_total)."""
        return metric_sum(self.server.metrics_url, "gemmserve_admitted_bytes_total")

    def assert_server_still_serves(self):
        """A valid request of each model, with fresh values, gets its own exact answer."""
        rng = np.random.default_rng(next(self._good_seed))
        # Small integers keep every float result exact whatever the summation order.
        a = rng.integers(-8, 8, size=(3, 4)).astype(np.float32)
        b = rng.integers(-8, 8, size=(4, 5)).astype(np.float32)
        y = self.infer_outputs("matmul", [("A", a), ("B", b)])["Y"]
        np.testing.assert_array_equal(y, a @ b, "matmul after a rejected request")

        x = rng.integers(-8, 8, size=(3, 4)).astype(np.float32)
        w = rng.integers(-8, 8, size=(2, 4, 5)).astype(np.float32)
        idx = rng.integers(0, 2, size=(3, 2)).astype(np.int64)
        bias = rng.integers(-8, 8, size=(2, 5)).astype(np.float32)
        out = self.infer_outputs("grouped_matmul", [("input", x), ("weights", w),
                                                    ("group_indices", idx), ("bias", bias)])
        expected = np.einsum("mk,mskn->msn", x, w[idx]) + bias[idx]
        np.testing.assert_array_equal(out["output"], expected,
                                      "grouped_matmul after a rejected request")

    # ----------------------------------------------------------------- HTTP

    def http(self, method, path, body=None, timeout=30):
        """(status, parsed JSON or None) of an HTTP call to the server, `body` sent as JSON."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server.http_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    # ------------------------------------------------------ model repository

    def load(self, name, config=None, files=None, timeout=60):
        """RepositoryModelLoad, with `config` (config.pbtxt text) and `files` ({path: bytes})
        as Triton's parameters "config" and "file:<path>"."""
        params = {}
        if config is not None:
            params["config"] = pb2.ModelRepositoryParameter(string_param=config)
        for path, data in (files or {}).items():
            params[f"file:{path}"] = pb2.ModelRepositoryParameter(bytes_param=data)
        return self.stub.RepositoryModelLoad(
            pb2.RepositoryModelLoadRequest(model_name=name, parameters=params), timeout=timeout)

    @staticmethod
    def moe_request(model, x, idx):
        """A request to a resident GroupedMatMul of onnx_models.grouped_graph."""
        return make_infer_request(model, [("tokens", x), ("routing", idx)])

    def run_moe(self, model, x, idx):
        """The expert_out of such a model for tokens `x` and routing `idx`."""
        return decode_outputs(self.infer(self.moe_request(model, x, idx)))["expert_out"]

    # ----------------------------------------------------- model shortcuts

    def single_output(self, request, name, datatype, timeout):
        response = self.infer(request, timeout=timeout)
        self.assertEqual([t.name for t in response.outputs], [name])
        self.assertEqual(response.outputs[0].datatype, datatype,
                         "the output has the inputs' datatype")
        return decode_outputs(response)[name]

    def run_matmul(self, a, b, datatype, typed=False, timeout=60.0):
        """Y of matmul(A=a, B=b), both sent as `datatype`; checks Y's name and datatype."""
        request = make_infer_request("matmul", [("A", a, datatype), ("B", b, datatype)],
                                     typed=typed)
        return self.single_output(request, "Y", datatype, timeout)

    def run_grouped_matmul(self, x, w, idx, bias, datatype, typed=False, timeout=60.0):
        """output of grouped_matmul; `bias` None leaves the optional input out."""
        inputs = [("input", x, datatype), ("weights", w, datatype), ("group_indices", idx)]
        if bias is not None:
            inputs.append(("bias", bias, datatype))
        request = make_infer_request("grouped_matmul", inputs, typed=typed)
        return self.single_output(request, "output", datatype, timeout)
