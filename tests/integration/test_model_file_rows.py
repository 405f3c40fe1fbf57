"""RELIABILITY.md, model-file rows L1-L4, through the real server: a model
repository with hostile entries at start-up and hostile RepositoryModelLoad
calls at run time. Each is refused with INVALID_ARGUMENT naming the problem,
the server starts and serves on, and nothing is left behind.

Issue 12, findings 3-5: priority_levels 2^31-1 aborted the server (and its
start-up, exit 134) and 2^31 wrapped; a symlinked weights.bin outside the
repository was served; a NUL in a model name answered INTERNAL, control
characters were echoed raw, and every loaded-then-unloaded name stayed in
/metrics for good."""
import glob
import os
import re
import shutil
import stat
import tempfile
import unittest

import grpc
import numpy as np

from gemmserve_client import make_infer_request, pb2
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.onnx_models import (batching_config, grouped_graph, grouped_reference,
                                           model_bytes, write_model)
from gemmserve_testing.process import metric_samples

INVALID = grpc.StatusCode.INVALID_ARGUMENT
RNG = np.random.default_rng(4)
K, N, G, S = 8, 4, 3, 2
W = RNG.standard_normal((G, K, N)).astype(np.float32)
MODEL = model_bytes(grouped_graph("m", W, S)).SerializeToString()

_REPO = tempfile.mkdtemp(prefix="gemmserve-files-")
_ELSEWHERE = tempfile.mkdtemp(prefix="gemmserve-elsewhere-")
_LOAD_DIRS_BEFORE = set(glob.glob(os.path.join(tempfile.gettempdir(), "gemmserve-load-*")))


def _external_model(name):
    """`name` with its weights in DIR/name/1/weights.bin; returns the weights path."""
    path = write_model(_REPO, name, grouped_graph(name, W, S), external=True)
    return os.path.join(os.path.dirname(path), "weights.bin")


write_model(_REPO, "good", grouped_graph("good", W, S), config=batching_config(100))
# L2 at start-up: each of these aborted or wrapped before.
for _name, _config in {
        "prio_huge": "dynamic_batching { priority_levels: 2147483647 }",
        "prio_wrap": "dynamic_batching { priority_levels: 2147483648 }",
        "prio_max": "dynamic_batching { priority_levels: 4294967295 }",
        "default_above_levels": "dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
        "delay_huge": "dynamic_batching { max_queue_delay_microseconds: 18446744073709551615 }",
}.items():
    write_model(_REPO, _name, grouped_graph(_name, W, S), config=_config)
# L1: weights that lead out of the repository, or are not regular files.
_secret = os.path.join(_ELSEWHERE, "secret.bin")
shutil.copy(_external_model("linked_weights"), _secret)
os.remove(os.path.join(_REPO, "linked_weights", "1", "weights.bin"))
os.symlink(_secret, os.path.join(_REPO, "linked_weights", "1", "weights.bin"))
_fifo = _external_model("fifo_weights")
os.remove(_fifo)
os.mkfifo(_fifo)
_dev = _external_model("device_weights")
os.remove(_dev)
os.symlink("/dev/zero", _dev)
os.makedirs(os.path.join(_ELSEWHERE, "model_dir", "1"))
shutil.copy(write_model(_ELSEWHERE, "x", grouped_graph("x", W, S)),
            os.path.join(_ELSEWHERE, "model_dir", "1", "model.onnx"))
os.makedirs(os.path.join(_REPO, "linked_version"))
os.symlink(os.path.join(_ELSEWHERE, "model_dir", "1"), os.path.join(_REPO, "linked_version", "1"))
os.symlink(os.path.join(_ELSEWHERE, "model_dir"), os.path.join(_REPO, "linked_model_dir"))
os.makedirs(os.path.join(_REPO, "linked_model_file", "1"))
os.symlink(os.path.join(_ELSEWHERE, "model_dir", "1", "model.onnx"),
           os.path.join(_REPO, "linked_model_file", "1", "model.onnx"))

_STARTUP_REFUSED = {
    "prio_huge": "priority_levels 2147483647 is over the limit of 256",
    "prio_wrap": "priority_levels 2147483648 is over the limit of 256",
    "prio_max": "priority_levels 4294967295 is over the limit of 256",
    "default_above_levels": "default_priority_level 3 is above priority_levels 2",
    "delay_huge": "max_queue_delay_microseconds 18446744073709551615 is over the limit",
    "linked_weights": "leads outside",
    "fifo_weights": "not a regular file",
    "device_weights": "leads outside",
    "linked_version": "leads outside",
    "linked_model_dir": "leads outside the model repository",
    "linked_model_file": "leads outside",
}


def tearDownModule():
    shutil.rmtree(_REPO, ignore_errors=True)
    shutil.rmtree(_ELSEWHERE, ignore_errors=True)


class ModelFileRowsTest(GemmServeTestCase):
    server_flags = (f"--model_repository={_REPO}",)

    def load_error(self, name, config=None, files=None):
        with self.assertRaises(grpc.RpcError) as ctx:
            self.load(name, config, files)
        self.server.assert_alive()
        return ctx.exception

    def index(self):
        index = self.stub.RepositoryIndex(pb2.RepositoryIndexRequest(), timeout=10)
        return {m.name: (m.state, m.reason) for m in index.models}

    def assert_good_model_serves(self):
        x = RNG.standard_normal((3, K)).astype(np.float32)
        idx = RNG.integers(0, G, (3, S)).astype(np.int64)
        np.testing.assert_allclose(self.run_moe("good", x, idx), grouped_reference(x, W, idx),
                                   rtol=1e-5, atol=1e-5)
        self.assert_server_still_serves()

    def assert_nothing_left_in_tmp(self):
        now = set(glob.glob(os.path.join(tempfile.gettempdir(), "gemmserve-load-*")))
        self.assertEqual(now - _LOAD_DIRS_BEFORE, set())

    # ------------------------------------------------------------------ L1

    def test_l1_startup_refuses_links_out_fifos_and_devices_and_serves_on(self):
        index = self.index()
        for name, reason in _STARTUP_REFUSED.items():
            with self.subTest(name):
                self.assertEqual(index[name][0], "UNAVAILABLE", index[name])
                self.assertIn(reason, index[name][1])
                self.assertNotIn(_ELSEWHERE, index[name][1])
                error = self.rpc_error(self.stub.ModelInfer, make_infer_request(
                    name, [("tokens", np.zeros((1, K), np.float32)),
                           ("routing", np.zeros((1, S), np.int64))]))
                self.assertEqual(error.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(index["good"][0], "READY")
        self.assert_good_model_serves()

    def test_l1_reloading_a_linked_model_is_refused_each_time(self):
        for name in ("linked_weights", "linked_version", "linked_model_dir", "fifo_weights"):
            with self.subTest(name):
                error = self.load_error(name)
                self.assertEqual(error.code(), INVALID, error.details())
                self.assertIn("leads outside" if "linked" in name else "not a regular file",
                              error.details())
                self.assertNotIn(_ELSEWHERE, error.details())
        self.assert_good_model_serves()

    def test_l1_a_device_node_is_refused(self):
        dev = _external_model("char_device")
        os.remove(dev)
        try:
            os.mknod(dev, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
        except PermissionError:
            self.skipTest("mknod is not permitted here")
        error = self.load_error("char_device")
        self.assertEqual(error.code(), INVALID)
        self.assertIn("not a regular file", error.details())
        self.assert_good_model_serves()

    def test_l1_uploaded_paths_and_external_locations_stay_inside(self):
        for path in ("../escape/model.onnx", "/etc/model.onnx", "1/../../model.onnx", "1//x",
                     "1/./model.onnx"):
            with self.subTest(path=path):
                error = self.load_error("up", config="", files={path: MODEL})
                self.assertEqual(error.code(), INVALID, error.details())
        external = grouped_graph("up", W, S)
        init = external.initializer[0]
        init.data_location = 1  # EXTERNAL
        raw = init.raw_data
        init.ClearField("raw_data")
        entry = init.external_data.add()
        entry.key, entry.value = "location", "../w.bin"
        error = self.load_error("up", config="", files={
            "1/model.onnx": model_bytes(external).SerializeToString(), "w.bin": raw})
        self.assertEqual(error.code(), INVALID)
        self.assertIn("leads outside", error.details())
        self.assert_nothing_left_in_tmp()
        self.assert_good_model_serves()

    # ------------------------------------------------------------------ L2

    def test_l2_config_fields_out_of_range_are_refused_at_load(self):
        cases = {
            "priority_levels: 2147483648": "priority_levels 2147483648 is over the limit of 256",
            "priority_levels: 4294967296": "priority_levels 4294967296 is over the limit of 256",
            "priority_levels: 18446744073709551616": "config.pbtxt: line 1",
            "priority_levels: 4294967295": "priority_levels 4294967295 is over the limit of 256",
            "priority_levels: 1000000000": "priority_levels 1000000000 is over the limit of 256",
            "priority_levels: 2147483647": "priority_levels 2147483647 is over the limit of 256",
            "priority_levels: 4 default_priority_level: 5": "above priority_levels 4",
            "max_queue_delay_microseconds: 10000001": "max_queue_delay_microseconds 10000001",
            "max_queue_delay_microseconds: -1": "config.pbtxt: line 1",
            "default_queue_policy { max_queue_size: 1000001 }":
                "max_queue_size 1000001 is over the limit",
            "} parameters { key: 'max_batch_rows' value { string_value: '16777217' } ":
                "max_batch_rows 16777217 is over the limit",
            "default_queue_policy { default_timeout_microseconds: 3600000001 }":
                "default_timeout_microseconds",
            "} parameters { key: 'max_concurrent_batches' value { string_value: '65' } ":
                "parameters['max_concurrent_batches'] 65 is over the limit of 64",
            "} instance_group { count: 65 ": "instance_group.count 65",
            "} max_batch_size: 16777217 instance_group { ":
                "max_batch_size 16777217: outside 0 to the limit of 16777216",
            "preferred_batch_size: 0": "preferred_batch_size 0",
            "preferred_batch_size: 8 } max_batch_size: 4 instance_group { ":
                "outside 1 to max_batch_size 4",
        }
        for field, message in cases.items():
            with self.subTest(field):
                error = self.load_error("cfg", config=f"dynamic_batching {{ {field} }}",
                                        files={"1/model.onnx": MODEL})
                self.assertEqual(error.code(), INVALID, error.details())
                self.assertIn(message, error.details())
                self.assertEqual(self.index()["cfg"][0], "UNAVAILABLE")
        self.assertTrue(self.load("cfg", config="dynamic_batching { priority_levels: 256 "
                                                "default_priority_level: 256 }",
                                  files={"1/model.onnx": MODEL}) is not None)
        config = self.stub.ModelConfig(pb2.ModelConfigRequest(name="cfg"), timeout=10).config
        self.assertEqual(config.dynamic_batching.priority_levels, 256)
        self.assert_nothing_left_in_tmp()
        self.assert_good_model_serves()

    # ------------------------------------------------------------------ L3

    def test_l3_bad_model_names_are_invalid_argument_never_internal_and_escaped(self):
        names = {"nul": "with\x00nul", "control": "evil\x1b[31m\x07", "slash": "a/b",
                 "dotdot": "..", "hidden": ".x", "long": "x" * 129, "reserved": "_unknown",
                 "newline": "line\nbreak"}
        for what, name in names.items():
            with self.subTest(what):
                calls = [
                    lambda: self.load(name, config="", files={"1/model.onnx": MODEL}),
                    lambda: self.stub.RepositoryModelUnload(
                        pb2.RepositoryModelUnloadRequest(model_name=name), timeout=10),
                    lambda: self.stub.ModelInfer(make_infer_request(
                        name, [("tokens", np.zeros((1, K), np.float32)),
                               ("routing", np.zeros((1, S), np.int64))]), timeout=10),
                    lambda: self.stub.ModelMetadata(pb2.ModelMetadataRequest(name=name),
                                                    timeout=10),
                    lambda: self.stub.ModelConfig(pb2.ModelConfigRequest(name=name), timeout=10),
                ]
                for call in calls:
                    with self.assertRaises(grpc.RpcError) as ctx:
                        call()
                    self.assertEqual(ctx.exception.code(), INVALID, ctx.exception.details())
                    details = ctx.exception.details()
                    self.assertIsNone(re.search(r"[\x00-\x1f\x7f]", details), repr(details))
                self.assertNotIn(name, self.index())
        self.assert_good_model_serves()

    # ------------------------------------------------------------------ L4

    def test_l4_a_hundred_load_unload_cycles_leave_metrics_and_index_as_before(self):
        def model_labels():
            return {l["model"] for l, _ in metric_samples(self.server.metrics_url,
                                                          "gemmserve_requests_total")}
        x = np.zeros((1, K), np.float32)
        idx = np.zeros((1, S), np.int64)
        labels_before, index_before = model_labels(), set(self.index())
        for i in range(100):
            name = f"cycle_{i}"
            self.load(name, config=batching_config(50), files={"1/model.onnx": MODEL})
            self.infer(make_infer_request(name, [("tokens", x), ("routing", idx)]))
            if i == 0:
                self.assertIn(name, model_labels())
            self.stub.RepositoryModelUnload(pb2.RepositoryModelUnloadRequest(model_name=name),
                                            timeout=10)
        # A failed load's entry goes when it is unloaded.
        self.load_error("cycle_failed", config="", files={"1/model.onnx": b"junk"})
        self.assertIn("cycle_failed", self.index())
        self.stub.RepositoryModelUnload(pb2.RepositoryModelUnloadRequest(
            model_name="cycle_failed"), timeout=10)
        self.assertEqual(set(self.index()), index_before)
        self.assertEqual(model_labels(), labels_before)
        self.assertIn("_unknown", labels_before)
        self.assert_good_model_serves()


if __name__ == "__main__":
    unittest.main()
