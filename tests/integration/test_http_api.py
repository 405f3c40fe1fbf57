"""The HTTP/REST front end through real HTTP to a real server process: every
endpoint, every ONNX conformance case with JSON data and again with binary
data, and a parity table: the same requests over gRPC and over HTTP give
byte-identical results (binary) and identical values (JSON)."""
import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import grpc
import numpy as np

from gemmserve_client import bf16_bits_to_float32, decode_outputs, make_infer_request, pb2
from gemmserve_client.http import HttpClient
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.onnx_models import matmul_graph, model_bytes
from gemmserve_testing.process import ProcessMemory, server_is_sanitized
from gemmserve_testing.references import random_wire, small_int_wire

import test_onnx_conformance as conformance

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class HttpTestCase(GemmServeTestCase):
    def setUp(self):
        self.http = HttpClient(self.server.http_url)
        self.addCleanup(self.http.close)


class TritonParityTest(HttpTestCase):
    """Issue 39's first four findings with tritonclient: what both protocols must say
    alike (server extensions, the classification refusal, Triton's statistics fields)."""

    def test_server_metadata_lists_the_same_extensions_over_both_protocols(self):
        grpc_meta = self.stub.ServerMetadata(pb2.ServerMetadataRequest(), timeout=10)
        http_meta = self.http.server_metadata()
        self.assertEqual(list(grpc_meta.extensions), http_meta["extensions"])
        self.assertIn("binary_tensor_data", grpc_meta.extensions)

    def test_classification_is_refused_over_both_protocols(self):
        request = make_infer_request("matmul", [("A", np.ones((1, 1), np.float32)),
                                                ("B", np.ones((1, 1), np.float32))])
        output = request.outputs.add(name="Y")
        output.parameters["classification"].int64_param = 2
        error = self.rpc_error(self.stub.ModelInfer, request)
        self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("'classification' is not supported", error.details())
        body = json.dumps({"inputs": [
            {"name": "A", "shape": [1, 1], "datatype": "FP32", "data": [1]},
            {"name": "B", "shape": [1, 1], "datatype": "FP32", "data": [1]}],
            "outputs": [{"name": "Y", "parameters": {"classification": 2}}]}).encode()
        status, _, data = self.http.request("POST", "/v2/models/matmul/infer", body)
        self.assertEqual(status, 400)
        self.assertIn("'classification' is not supported", json.loads(data)["error"])

    def test_statistics_carry_tritons_fields_over_both_protocols(self):
        self.http.infer("matmul", [("A", np.ones((2, 2), np.float32)),
                                   ("B", np.ones((2, 2), np.float32))])
        stats = self.http.model_statistics("matmul")["model_stats"][0]
        for field in ("success", "fail", "queue", "compute_input", "compute_infer",
                      "compute_output", "cache_hit", "cache_miss"):
            self.assertEqual(set(stats["inference_stats"][field]), {"count", "ns"}, field)
        for batch in stats["batch_stats"]:
            self.assertIn("compute_input", batch)
            self.assertIn("compute_output", batch)
        grpc_stats = self.stub.ModelStatistics(pb2.ModelStatisticsRequest(name="matmul"),
                                               timeout=10).model_stats[0]
        for field in ("compute_input", "compute_output", "cache_hit", "cache_miss"):
            self.assertTrue(grpc_stats.inference_stats.HasField(field), field)


    def load_http(self, name, config, model):
        body = json.dumps({"parameters": {
            "config": config, "file:1/model.onnx": base64.b64encode(model).decode()}}).encode()
        return self.http.request("POST", f"/v2/repository/models/{name}/load", body)

    def test_a_load_takes_tritons_json_config_and_what_model_config_reports_loads_back(self):
        """tritonclient's load_model(config=json.dumps({...})), over both protocols; the
        config the server reports (HTTP JSON) loads back as it is, and reports the same."""
        model = model_bytes(matmul_graph(
            "lin_json", np.arange(6, dtype=np.float32).reshape(2, 3))).SerializeToString()
        config = json.dumps({
            "name": "lin_json", "platform": "onnxruntime_onnx", "max_batch_size": 0,
            "input": [{"name": "hidden", "data_type": "TYPE_FP32", "dims": [-1, 2]}],
            "instance_group": [{"kind": "KIND_CPU", "count": 1}],
            "dynamic_batching": {"max_queue_delay_microseconds": 300,
                                 "default_queue_policy": {"max_queue_size": 17}},
            "parameters": {"max_batch_rows": {"string_value": "64"}}})
        status, _, data = self.load_http("lin_json", config, model)
        self.assertEqual(status, 200, data)
        reported = self.http.model_config("lin_json")
        self.assertEqual(reported["dynamic_batching"]["max_queue_delay_microseconds"], 300)
        self.assertEqual(reported["dynamic_batching"]["default_queue_policy"]["max_queue_size"],
                         17)
        self.assertEqual(reported["parameters"]["max_batch_rows"]["string_value"], "64")
        status, _, data = self.load_http("lin_json", json.dumps(reported), model)  # as it is
        self.assertEqual(status, 200, data)
        again = self.http.model_config("lin_json")
        self.assertEqual(again, reported)
        request = pb2.RepositoryModelLoadRequest(model_name="lin_json")
        request.parameters["config"].string_param = config
        request.parameters["file:1/model.onnx"].bytes_param = model
        self.stub.RepositoryModelLoad(request, timeout=60)
        grpc_config = self.stub.ModelConfig(pb2.ModelConfigRequest(name="lin_json"),
                                            timeout=10).config
        self.assertEqual(grpc_config.dynamic_batching.default_queue_policy.max_queue_size, 17)
        # What does not fit the model is refused, naming the field and the form.
        bad = json.dumps({"input": [{"name": "hidden", "dims": [-1, 5]}]})
        status, _, data = self.load_http("lin_json", bad, model)
        self.assertEqual(status, 400, data)
        self.assertIn("declares dims [-1, 5]", json.loads(data)["error"])
        misspelt = json.dumps({"dynamic_batching": {},
                               "parameters": {"max_batch_row": {"string_value": "8"}}})
        status, _, data = self.load_http("lin_json", misspelt, model)
        self.assertEqual(status, 400, data)
        self.assertIn("parameter 'max_batch_row' is neither", json.loads(data)["error"])
        request.parameters["config"].string_param = '{"max_batch_size": 4, "nmae": 1}'
        error = self.rpc_error(self.stub.RepositoryModelLoad, request)
        self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("Triton's JSON form", error.details())
        self.stub.RepositoryModelUnload(pb2.RepositoryModelUnloadRequest(model_name="lin_json"),
                                        timeout=60)

    # Issue 50: fields a config may carry that gemmserve cannot honour, in Triton's JSON
    # form and (for tensors) in config.pbtxt, each with what its refusal must name.
    UNHONOURED = [
        ({"input": [{"name": "hidden", "dims": [-1, 2], "optional": True}]},
         "input 'hidden': optional is not supported"),
        ({"input": [{"name": "hidden", "dims": [-1, 2], "reshape": {"shape": [2]}}]},
         "input 'hidden': reshape is not supported"),
        ({"input": [{"name": "hidden", "dims": [-1, 2], "is_shape_tensor": True}]},
         "input 'hidden': is_shape_tensor is not supported"),
        ({"input": [{"name": "hidden", "dims": [-1, 2], "allow_ragged_batch": True}]},
         "input 'hidden': allow_ragged_batch is not supported"),
        ({"input": [{"name": "hidden", "dims": [-1, 2], "format": "FORMAT_NHWC"}]},
         "input 'hidden': format is not supported"),
        ({"output": [{"name": "projected", "dims": [-1, 3], "reshape": {"shape": [3]}}]},
         "output 'projected': reshape is not supported"),
        ({"output": [{"name": "projected", "dims": [-1, 3],
                     "label_filename": "labels.txt"}]},
         "output 'projected': label_filename is not supported"),
        ({"runtime": "libtorch"}, "runtime: 'libtorch'"),
        ({"instance_group": [{"kind": "KIND_CPU", "count": 100000}]},
         "instance_group.count 100000"),
        ({"instance_group": [{"kind": "KIND_CPU", "passive": True}]}, "instance_group.passive"),
        ({"version_policy": {"latest": {"num_versions": 0}}},
         "version_policy.latest.num_versions 0"),
        ({"input": [{"name": "hidden", "dims": [[-1], [2]]}]},
         "an array directly inside an array"),
        ('input { name: "hidden" dims: [-1, 2] reshape { shape: [2] } }',
         "config.pbtxt: input 'hidden': reshape is not supported"),
        ('input { name: "hidden" dims: [-1, 2] optional: true }',
         "input 'hidden': optional is not supported"),
        ('output { name: "projected" dims: [-1, 3] label_filename: "labels.txt" }',
         "config.pbtxt: output 'projected': label_filename is not supported"),
    ]

    def assert_load_refused_by_both(self, request, config_text, model, message):
        """`request` (gRPC) with `config_text`, and the same load over HTTP, are refused as
        INVALID_ARGUMENT / 400 with `message` in the error."""
        request.parameters["config"].string_param = config_text
        error = self.rpc_error(self.stub.RepositoryModelLoad, request, timeout=60)
        self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT, error.details())
        self.assertIn(message, error.details())
        status, _, data = self.load_http("lin_refused", config_text, model)
        self.assertEqual(status, 400, data)
        self.assertIn(message, json.loads(data)["error"])

    def test_what_a_config_asks_that_gemmserve_cannot_do_is_refused_by_name(self):
        """C9, C10: over gRPC and HTTP, a load whose config asks what gemmserve cannot do is
        INVALID_ARGUMENT (400) naming the field, and the version loaded before serves on;
        1 MB of JSON nested 500,000 deep is refused before it is parsed, with the server's
        peak memory flat (it loaded, and took 150 MiB)."""
        served = np.arange(6, dtype=np.float32).reshape(2, 3)
        status, _, data = self.load_http("lin_refused", "", model_bytes(
            matmul_graph("lin_refused", served)).SerializeToString())
        self.assertEqual(status, 200, data)
        model = model_bytes(matmul_graph("lin_refused", served + 1)).SerializeToString()
        request = pb2.RepositoryModelLoadRequest(model_name="lin_refused")
        request.parameters["file:1/model.onnx"].bytes_param = model
        x = np.array([[1, 2], [3, 4]], np.float32)
        for config, message in self.UNHONOURED:
            text = config if isinstance(config, str) else json.dumps(config)
            with self.subTest(config=text):
                self.assert_load_refused_by_both(request, text, model, message)
                y = self.http.infer("lin_refused", [("hidden", x)])["projected"]
                np.testing.assert_array_equal(y, x @ served, "the version loaded before")
        deep = [("arrays", '{"input": ' + "[" * 500_000 + "]" * 500_000 + "}",
                 "an array directly inside an array at byte 11"),
                ("arrays of objects", "{" + '"input": [{' * 90_500 + "}",
                 "nested 65 levels deep at byte 352, over the limit of 64 levels")]
        memory = ProcessMemory(self.server.proc.pid)
        for kind, text, message in deep:
            with self.subTest(deep=kind):
                self.assertGreater(len(text), 990_000)
                memory.reset_peak()
                self.assert_load_refused_by_both(request, text, model, message)
                growth = memory.peak_growth()
                print(f"\n{kind} nested {len(text)} bytes: peak growth {growth / 2**20:.1f} MiB")
                if not server_is_sanitized():
                    self.assertLess(growth, 16 * 2**20)
        np.testing.assert_array_equal(self.http.infer("lin_refused", [("hidden", x)])[
            "projected"], x @ served)
        self.assert_server_still_serves()
        self.stub.RepositoryModelUnload(pb2.RepositoryModelUnloadRequest(
            model_name="lin_refused"), timeout=60)


class LogSettingsTest(HttpTestCase):
    """Triton's LogSettings over gRPC and GET/POST /v2/logging: one Serving method behind
    both; changes take effect on the next line; log_file needs --allow_log_file_setting."""

    def grpc_settings(self, **settings):
        request = pb2.LogSettingsRequest()
        for key, value in settings.items():
            field = ("bool_param" if isinstance(value, bool) else
                     "uint32_param" if isinstance(value, int) else "string_param")
            setattr(request.settings[key], field, value)
        response = self.stub.LogSettings(request, timeout=10)
        return {k: getattr(v, v.WhichOneof("parameter_choice"))
                for k, v in response.settings.items()}

    def post(self, settings):
        status, _, data = self.http.request("POST", "/v2/logging", json.dumps(settings).encode())
        return status, json.loads(data)

    def test_settings_take_effect_at_once_over_both_protocols(self):
        status, _, data = self.http.request("GET", "/v2/logging")
        self.assertEqual(status, 200, data)
        self.assertEqual(json.loads(data), {
            "log_error": True, "log_file": "", "log_format": "default", "log_info": True,
            "log_verbose_level": 0, "log_warning": True})
        self.assertEqual(self.grpc_settings(), json.loads(data))
        self.assertIn("logging", self.stub.ServerMetadata(pb2.ServerMetadataRequest(),
                                                          timeout=10).extensions)
        # ISO8601 from the next line: the change itself is logged (WARNING).
        self.assertEqual(self.grpc_settings(log_format="ISO8601", log_verbose_level=2),
                         {**json.loads(data), "log_format": "ISO8601", "log_verbose_level": 2})
        iso = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ W .*log settings set by a client: "
                         r"log_format, log_verbose_level$", re.M)
        self.assertRegex(self.server.stderr_text(1 << 20), iso)
        # Warnings off: the next change is not logged; back on, it is, in the default form.
        status, now = self.post({"log_warning": False, "log_format": "default"})
        self.assertEqual((status, now["log_warning"], now["log_format"]), (200, False, "default"))
        self.assertNotIn("log settings set by a client: log_format, log_warning",
                         self.server.stderr_text(1 << 20))
        self.assertEqual(self.post({"log_warning": True})[1]["log_warning"], True)
        self.assertRegex(self.server.stderr_text(1 << 20),
                         re.compile(r"^W \d{4}-.*log settings set by a client: log_warning$", re.M))

    def test_bad_settings_change_nothing(self):
        before = self.grpc_settings()
        cases = [({"log_info": 1}, 400, "must be a bool"),
                 ({"log_format": "xml"}, 400, "default, ISO8601"),
                 ({"log_colour": True}, 400, "unknown log setting"),
                 ({"log_info": False, "log_file": "/tmp/x.log"}, 403, "--allow_log_file_setting"),
                 ({"log_info": [1]}, 400, "a bool, a uint32 or a string")]
        for settings, code, text in cases:
            with self.subTest(settings=settings):
                status, body = self.post(settings)
                self.assertEqual(status, code, body)
                self.assertIn(text, body["error"])
        self.assertEqual(self.grpc_settings(), before)
        error = self.rpc_error(self.stub.LogSettings, pb2.LogSettingsRequest(
            settings={"log_file": pb2.LogSettingsRequest.SettingValue(string_param="/tmp/y")}))
        self.assertEqual(error.code(), grpc.StatusCode.PERMISSION_DENIED)


class LogFileTest(HttpTestCase):
    server_flags = ("--allow_log_file_setting",)

    def test_log_file_when_allowed(self):
        tmp = os.path.realpath(tempfile.mkdtemp(prefix="gemmserve-log-"))
        self.addCleanup(shutil.rmtree, tmp, True)
        path = os.path.join(tmp, "server.log")
        body = json.dumps({"log_file": path}).encode()
        status, _, data = self.http.request("POST", "/v2/logging", body)
        self.assertEqual(status, 200, data)
        with open(path) as f:
            self.assertIn("log settings set by a client: log_file", f.read())
        status, _, data = self.http.request("POST", "/v2/logging",
                                            b'{"log_file": "/nonexistent/dir/x.log"}')
        self.assertEqual(status, 400, data)
        self.assertIn("cannot be opened", json.loads(data)["error"])
        # A FIFO with no reader would block the thread that opens it: refused at once.
        fifo = os.path.join(tmp, "fifo")
        os.mkfifo(fifo)
        for bad in (fifo, tmp):
            status, _, data = self.http.request("POST", "/v2/logging",
                                                json.dumps({"log_file": bad}).encode())
            self.assertEqual(status, 400, data)
        self.assertEqual(self.http.request("GET", "/v2/health/live")[0], 200)
        status, _, data = self.http.request("POST", "/v2/logging", b'{"log_file": ""}')
        self.assertEqual((status, json.loads(data)["log_file"]), (200, ""))

    def test_log_file_takes_only_a_regular_file_reached_without_links(self):
        """Issue 50, finding 5: a kernel pseudo-file (procfs, sysfs), a device, a path
        through a symbolic link (at its end or on the way), a relative path and one with
        control characters are refused over both protocols, before anything is written or
        the log is switched, and the path is echoed escaped."""
        tmp = os.path.realpath(tempfile.mkdtemp(prefix="gemmserve-log-"))
        self.addCleanup(shutil.rmtree, tmp, True)
        self.addCleanup(self.http.request, "POST", "/v2/logging", b'{"log_file": ""}')
        real = os.path.join(tmp, "real.log")
        open(real, "w").close()
        os.symlink(real, os.path.join(tmp, "link.log"))
        os.symlink(tmp, os.path.join(tmp, "dir"))
        comm = f"/proc/{self.server.proc.pid}/comm"
        with open(comm) as f:
            name = f.read()
        cases = [("/proc/self/comm", "procfs"),
                 ("/sys/kernel/uevent_seqnum", "sysfs"),
                 ("/dev/null", "not a regular file"),
                 (os.path.join(tmp, "link.log"), "symbolic link"),
                 (os.path.join(tmp, "dir", "real.log"), "symbolic link"),
                 ("relative.log", "absolute"),
                 ("/nonexistent/\x1b[2J\n.log", "control character"),
                 (os.path.join(tmp, "new\nline\x1b[31m.log"), "control character")]
        for path, reason in cases:
            with self.subTest(path=path):
                request = pb2.LogSettingsRequest()
                request.settings["log_file"].string_param = path
                error = self.rpc_error(self.stub.LogSettings, request)
                self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT, error.details())
                status, _, data = self.http.request("POST", "/v2/logging",
                                                    json.dumps({"log_file": path}).encode())
                self.assertEqual(status, 400, data)
                for message in (error.details(), json.loads(data)["error"]):
                    self.assertIn(reason, message)
                    self.assertNotIn("\n", message)
                    self.assertNotIn("\x1b", message)
        with open(comm) as f:
            self.assertEqual(f.read(), name, "the server's main thread was renamed")
        self.assertEqual(os.path.getsize(real), 0)
        self.assertFalse(os.path.exists(cases[-1][0]))
        status, _, data = self.http.request("GET", "/v2/logging")
        self.assertEqual((status, json.loads(data)["log_file"]), (200, ""))


class EndpointsTest(HttpTestCase):
    def test_health_metadata_config_stats_and_repository(self):
        self.assertTrue(self.http.live())
        self.assertTrue(self.http.ready())
        meta = self.http.server_metadata()
        self.assertEqual(meta["name"], "gemmserve")
        for ext in ("binary_tensor_data", "model_repository", "statistics", "model_configuration"):
            self.assertIn(ext, meta["extensions"])
        model = self.http.model_metadata("grouped_matmul")
        self.assertEqual([i["name"] for i in model["inputs"]],
                         ["input", "weights", "group_indices", "bias"])
        self.assertEqual(self.http.model_metadata("matmul", "1")["versions"], ["1"])
        config = self.http.model_config("grouped_matmul")
        self.assertEqual(config["input"][0]["data_type"], "TYPE_FP32")
        self.assertIn("max_queue_delay_microseconds", config["dynamic_batching"])
        before = self.http.model_statistics("matmul")["model_stats"][0]["inference_count"]
        self.http.infer("matmul", [("A", np.ones((3, 2), np.float32)),
                                   ("B", np.ones((2, 2), np.float32))])
        after = self.http.model_statistics("matmul")["model_stats"][0]
        self.assertEqual(after["inference_count"], before + 3)
        self.assertEqual({s["name"] for s in self.http.model_statistics()["model_stats"]},
                         {"matmul", "grouped_matmul"})
        status, _, body = self.http.request("GET", "/v2/models/matmul/ready")
        self.assertEqual((status, body), (200, b""))
        self.assertEqual(self.http.request("GET", "/v2/models/absent/ready")[0], 400)
        status, _, body = self.http.request("POST", "/v2/repository/index", b'{"ready":true}')
        self.assertEqual(status, 200)
        self.assertEqual({m["name"] for m in json.loads(body)}, {"matmul", "grouped_matmul"})

    def test_errors_are_json_with_the_status_of_their_grpc_code(self):
        cases = [("GET", "/v2/models/absent", None, 404, "absent"),
                 ("GET", "/v2/models/matmul/versions/7", None, 404, "version"),
                 ("GET", "/v2/nowhere", None, 404, "no such endpoint"),
                 ("POST", "/v2/models/absent/infer", b'{"inputs":[]}', 404, "absent"),
                 ("POST", "/v2/models/matmul/infer", b'{"inputs":[', 400, "malformed JSON"),
                 ("DELETE", "/v2/models/matmul", None, 405, "not allowed"),
                 ("POST", "/v2/repository/models/absent/unload", None, 404, "absent")]
        for method, path, body, code, text in cases:
            with self.subTest(path=path):
                status, headers, data = self.http.request(method, path, body)
                self.assertEqual(status, code, data)
                self.assertIn(text, json.loads(data)["error"])
                self.assertEqual(headers["Content-Type"], "application/json")

    def test_load_and_unload_through_the_repository_endpoints(self):
        model = model_bytes(matmul_graph(
            "lin_http", np.arange(6, dtype=np.float32).reshape(2, 3))).SerializeToString()
        body = json.dumps({"parameters": {
            "config": "", "file:1/model.onnx": base64.b64encode(model).decode()}}).encode()
        status, _, data = self.http.request("POST", "/v2/repository/models/lin_http/load", body)
        self.assertEqual(status, 200, data)
        self.assertTrue(self.http.request("GET", "/v2/models/lin_http/ready")[0] == 200)
        status, _, data = self.http.request("POST", "/v2/repository/models/lin_http/unload")
        self.assertEqual(status, 200, data)
        self.assertEqual(self.http.request("GET", "/v2/models/lin_http/ready")[0], 400)
        status, _, data = self.http.request("POST", "/v2/repository/models/lin_http/load",
                                            b'{"parameters":{"file:1/model.onnx":"@@"}}')
        self.assertEqual(status, 400)
        self.assertIn("base64", json.loads(data)["error"])

    def test_compressed_request_and_response(self):
        import gzip
        import zlib
        a = np.arange(400, dtype=np.float32).reshape(20, 20)
        body = json.dumps({"inputs": [
            {"name": "A", "shape": [20, 20], "datatype": "FP32", "data": a.ravel().tolist()},
            {"name": "B", "shape": [20, 20], "datatype": "FP32",
             "data": np.eye(20, dtype=np.float32).ravel().tolist()}]}).encode()
        for coding, pack, unpack in (("gzip", gzip.compress, gzip.decompress),
                                     ("deflate", zlib.compress, zlib.decompress)):
            with self.subTest(coding=coding):
                status, headers, data = self.http.request(
                    "POST", "/v2/models/matmul/infer", pack(body),
                    {"Content-Encoding": coding, "Accept-Encoding": coding})
                self.assertEqual(status, 200, data)
                self.assertEqual(headers.get("Content-Encoding"), coding)
                out = json.loads(unpack(data))
                np.testing.assert_array_equal(
                    np.array(out["outputs"][0]["data"], np.float32).reshape(20, 20), a)
        status, _, data = self.http.request("POST", "/v2/models/matmul/infer", body,
                                            {"Content-Encoding": "br"})
        self.assertEqual(status, 415)


class ParityTest(HttpTestCase):
    """The same request over gRPC and over HTTP: identical answers."""

    def requests(self):
        rng = np.random.default_rng(3)
        for datatype in ("FP32", "FP64", "FP16", "BF16"):
            yield ("matmul", [("A", random_wire(rng, datatype, (5, 7)), datatype),
                              ("B", random_wire(rng, datatype, (7, 3)), datatype)])
            yield ("matmul", [("A", random_wire(rng, datatype, (2, 1, 4, 3)), datatype),
                              ("B", random_wire(rng, datatype, (3, 3, 2)), datatype)])
            idx = rng.integers(0, 3, size=(6, 2)).astype(np.int64)
            yield ("grouped_matmul", [("input", random_wire(rng, datatype, (6, 5)), datatype),
                                      ("weights", random_wire(rng, datatype, (3, 5, 4)), datatype),
                                      ("group_indices", idx),
                                      ("bias", random_wire(rng, datatype, (3, 4)), datatype)])
        for datatype in ("INT32", "INT64", "UINT32", "UINT64"):
            yield ("matmul", [("A", small_int_wire(rng, datatype, (4, 6)), datatype),
                              ("B", small_int_wire(rng, datatype, (6, 2)), datatype)])
        yield ("matmul", [("A", np.zeros((0, 3), np.float32)), ("B", np.ones((3, 2), np.float32))])
        yield ("grouped_matmul", [("input", np.ones((2, 3), np.float32)),
                                  ("weights", np.ones((2, 3, 4), np.float32)),
                                  ("group_indices", np.array([[1], [0]], np.int32))])

    def test_grpc_and_http_answers_are_identical(self):
        for model, inputs in self.requests():
            datatype = inputs[0][2] if len(inputs[0]) > 2 else "FP32"
            with self.subTest(model=model, datatype=datatype, shape=inputs[0][1].shape):
                grpc_out = decode_outputs(self.infer(make_infer_request(model, inputs)))
                binary = self.http.infer(model, inputs)
                text = self.http.infer(model, inputs, binary=False)
                self.assertEqual(binary.keys(), grpc_out.keys())
                for name, expected in grpc_out.items():
                    self.assertEqual(binary[name].dtype, expected.dtype)
                    self.assertEqual(binary[name].tobytes(), expected.tobytes(), name)
                    # JSON numbers read back to the same bits (no NaN in these).
                    self.assertEqual(text[name].astype(expected.dtype).tobytes(),
                                     expected.tobytes(), name)


class ConformanceOverRestTest(HttpTestCase):
    def test_conformance_data_is_present(self):
        self.assertGreaterEqual(len(conformance.CASES), conformance.MIN_CASES)

    def run_case(self, case_dir, binary):
        import onnx
        model = onnx.load(os.path.join(case_dir, "model.onnx"))
        node = model.graph.node[0]
        model_name, input_names, output_name = conformance.MODELS[node.op_type]
        graph_inputs = [i.name for i in model.graph.input]
        for data_set in sorted(d for d in os.listdir(case_dir) if d.startswith("test_data_set_")):
            data_set = os.path.join(case_dir, data_set)
            by_name = {}
            for i, graph_input in enumerate(graph_inputs):
                datatype, array, _ = conformance.load_tensor(os.path.join(data_set,
                                                                          f"input_{i}.pb"))
                by_name[graph_input] = (datatype, array)
            inputs = [(input_names[p], by_name[n][1], by_name[n][0])
                      for p, n in enumerate(node.input) if n]
            got = self.http.infer(model_name, inputs, binary=binary)[output_name]
            datatype, expected, _ = conformance.load_tensor(os.path.join(data_set, "output_0.pb"))
            self.assertEqual(got.shape, expected.shape)
            if datatype == "BF16":
                got, expected = bf16_bits_to_float32(got), bf16_bits_to_float32(expected)
            np.testing.assert_allclose(
                got, expected,
                **conformance.TOLERANCE.get(datatype, conformance.DEFAULT_TOLERANCE))


for _case in conformance.CASES:
    for _binary in (False, True):
        def _test(self, case=_case, binary=_binary):
            self.run_case(case, binary)
        _test.__name__ = f"{os.path.basename(_case)}_{'binary' if _binary else 'json'}"
        setattr(ConformanceOverRestTest, _test.__name__, _test)


class ReadmeCurlExamplesTest(HttpTestCase):
    """The curl examples of README.md and docs/http.md, run as written against this
    server's port."""

    def test_every_curl_example_answers_as_the_docs_say(self):
        blocks = []
        for doc in ("README.md", os.path.join("docs", "http.md")):
            with open(os.path.join(ROOT, doc)) as f:
                blocks += re.findall(r"```sh\n(.*?)```", f.read(), re.S)
        commands = []
        for block in blocks:
            if not block.startswith("curl "):
                continue  # another command's block
            for line in block.replace("\\\n", " ").splitlines():
                if line.startswith("curl "):
                    commands.append(line)
                elif line.strip():
                    commands[-1] += "\n" + line  # inside a quoted body

        self.assertGreaterEqual(len(commands), 8, "the docs show curl examples")
        curl = shutil.which("curl")
        self.assertIsNotNone(curl, "curl is installed (scripts/install_deps.sh --test)")
        for command in commands:
            with self.subTest(command=command[:80]):
                command = command.replace("localhost:8000", f"127.0.0.1:{self.server.http_port}")
                command = "curl -sS -w '\\n%{http_code}' " + command[len("curl "):]
                result = subprocess.run(["bash", "-c", command],
                                        capture_output=True, text=True, timeout=30)
                self.assertEqual(result.returncode, 0, result.stderr)
                body, _, code = result.stdout.rpartition("\n")
                self.assertEqual(code, "200", body)
                if body.strip():
                    reply = json.loads(body)
                    self.assertNotIn("error", reply)
                    if "model_name" in reply:  # an inference's answer
                        self.assertTrue(reply["outputs"][0]["data"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
