"""The non-inference RPCs: liveness and readiness, server and model metadata,
an RPC the server does not implement, grpc.health.v1 and server reflection."""
import os
import signal
import time
import unittest
import urllib.request

import grpc
import numpy as np

from gemmserve_client import pb2, pb2_grpc
from gemmserve_testing import wire
from gemmserve_testing.base import GemmServeTestCase, open_channel
from gemmserve_testing.cpu import (blis_config_number, cpu_flags, expected_blis_config,
                                   highest_isa, isa_levels_below)
from gemmserve_testing.server import ServerProcess, server_binary

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
REFLECTION_INFO = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
SERVING = 1  # grpc.health.v1.HealthCheckResponse.ServingStatus
NOT_SERVING = 2


def identity(data):
    return data


class ServiceRpcsTest(GemmServeTestCase):

    def test_server_is_live_and_ready(self):
        self.assertTrue(self.stub.ServerLive(pb2.ServerLiveRequest(), timeout=10).live)
        self.assertTrue(self.stub.ServerReady(pb2.ServerReadyRequest(), timeout=10).ready)

    def test_both_models_are_ready_with_and_without_a_version(self):
        for name in ("matmul", "grouped_matmul"):
            for version in ("", "1"):
                with self.subTest(model=name, version=version):
                    response = self.stub.ModelReady(
                        pb2.ModelReadyRequest(name=name, version=version), timeout=10)
                    self.assertTrue(response.ready)

    def test_unknown_model_or_version_is_not_ready(self):
        # Triton's behaviour, which gemmserve keeps for wire compatibility: ModelReady
        # answers OK with ready=false for a model or version it does not serve.
        for name, version in (("no_such_model", ""), ("matmul", "2"), ("grouped_matmul", "7")):
            with self.subTest(model=name, version=version):
                response = self.stub.ModelReady(pb2.ModelReadyRequest(name=name, version=version),
                                                timeout=10)
                self.assertFalse(response.ready)

    def test_server_metadata_names_the_server(self):
        response = self.stub.ServerMetadata(pb2.ServerMetadataRequest(), timeout=10)
        self.assertEqual(response.name, "gemmserve")
        self.assertTrue(response.version, "a version string is reported")

    def test_matmul_metadata_reports_inputs_with_default_datatype_and_variable_dims(self):
        response = self.stub.ModelMetadata(pb2.ModelMetadataRequest(name="matmul"), timeout=10)
        self.assertEqual(response.name, "matmul")
        self.assertEqual(list(response.versions), ["1"])
        for tensors, names in ((response.inputs, ["A", "B"]), (response.outputs, ["Y"])):
            self.assertEqual([t.name for t in tensors], names)
            for tensor in tensors:
                self.assertEqual(tensor.datatype, "FP32", tensor.name)
                self.assertTrue(tensor.shape, f"{tensor.name} has a shape")
                self.assertTrue(all(d == -1 for d in tensor.shape),
                                f"{tensor.name}: {list(tensor.shape)}")

    def test_grouped_matmul_metadata_reports_inputs_with_default_datatype_and_variable_dims(self):
        response = self.stub.ModelMetadata(
            pb2.ModelMetadataRequest(name="grouped_matmul", version="1"), timeout=10)
        self.assertEqual(response.name, "grouped_matmul")
        self.assertEqual(list(response.versions), ["1"])
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in response.inputs],
                         [("input", "FP32", [-1, -1]), ("weights", "FP32", [-1, -1, -1]),
                          ("group_indices", "INT64", [-1, -1]), ("bias", "FP32", [-1, -1])])
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in response.outputs],
                         [("output", "FP32", [-1, -1, -1])])

    def test_metadata_of_unknown_model_or_version_is_not_found(self):
        for name, version in (("no_such_model", ""), ("matmul", "2")):
            with self.subTest(model=name, version=version):
                error = self.rpc_error(self.stub.ModelMetadata,
                                       pb2.ModelMetadataRequest(name=name, version=version))
                self.assertEqual(error.code(), grpc.StatusCode.NOT_FOUND, error.details())

    def test_cuda_shared_memory_is_unimplemented_and_system_shared_memory_off(self):
        error = self.rpc_error(self.stub.CudaSharedMemoryStatus,
                               pb2.CudaSharedMemoryStatusRequest())
        self.assertEqual(error.code(), grpc.StatusCode.UNIMPLEMENTED, error.details())
        # System shared memory exists but is off without --allow_client_shm.
        error = self.rpc_error(self.stub.SystemSharedMemoryStatus,
                               pb2.SystemSharedMemoryStatusRequest())
        self.assertEqual(error.code(), grpc.StatusCode.PERMISSION_DENIED, error.details())
        self.assertIn("--allow_client_shm", error.details())
        self.assertTrue(self.stub.ServerLive(pb2.ServerLiveRequest(), timeout=10).live)

    def test_repository_index_lists_the_built_in_models_ready(self):
        index = self.stub.RepositoryIndex(pb2.RepositoryIndexRequest(), timeout=10)
        self.assertEqual([(m.name, m.version, m.state) for m in index.models],
                         [("grouped_matmul", "1", "READY"), ("matmul", "1", "READY")])

    def test_health_check_of_the_whole_server_is_serving(self):
        check = self.channel.unary_unary(HEALTH_CHECK, request_serializer=identity,
                                         response_deserializer=identity)
        # HealthCheckRequest{service = ""} encodes to no bytes at all.
        response = check(b"", timeout=10)
        self.assertEqual(wire.values(response, 1), [SERVING])

    def test_reflection_lists_the_inference_service(self):
        info = self.channel.stream_stream(REFLECTION_INFO, request_serializer=identity,
                                          response_deserializer=identity)
        # ServerReflectionRequest{list_services = "*"} (field 7).
        responses = list(info(iter([wire.length_delimited(7, "*")]), timeout=10))
        self.assertEqual(len(responses), 1)
        # ServerReflectionResponse.list_services_response (6) -> service (1) -> name (1).
        (listing,) = wire.values(responses[0], 6)
        names = [wire.values(service, 1)[0].decode() for service in wire.values(listing, 1)]
        self.assertIn("inference.GRPCInferenceService", names)

    def test_reflection_describes_the_inference_service(self):
        from google.protobuf import descriptor_pb2
        info = self.channel.stream_stream(REFLECTION_INFO, request_serializer=identity,
                                          response_deserializer=identity)
        # ServerReflectionRequest{file_containing_symbol (4)}.
        request = wire.length_delimited(4, "inference.GRPCInferenceService")
        responses = list(info(iter([request]), timeout=10))
        self.assertEqual(len(responses), 1)
        # file_descriptor_response (4) -> file_descriptor_proto (1), serialized.
        (files,) = wire.values(responses[0], 4)
        methods = {}
        for blob in wire.values(files, 1):
            descriptor = descriptor_pb2.FileDescriptorProto.FromString(blob)
            for service in descriptor.service:
                methods[f"{descriptor.package}.{service.name}"] = [m.name for m in service.method]
        self.assertIn("ModelInfer", methods.get("inference.GRPCInferenceService", []))


class ComputeEnvironmentTest(unittest.TestCase):
    """The server re-executes itself with the BLIS configuration the CPU's features call for
    (BLIS 0.9 picks by vendor and family: reference kernels on Zen 5, AVX2 ones on newer
    Intel CPUs with AVX-512) unless the user chose a configuration."""

    def start_with_env(self, **env):
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return ServerProcess(compute_threads=1).start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_blis_runs_the_kernels_the_cpu_features_call_for(self):
        for name in ("BLIS_ARCH_TYPE", "GEMMSERVE_MAX_CPU_ISA"):
            if name in os.environ:
                self.skipTest(f"{name} is set in the test environment")
        server = ServerProcess(compute_threads=1).start()
        try:
            log = server.stderr_text()
        finally:
            server.stop(timeout=20)
        # What this CPU's flags and BLIS's own choice call for (cpu.py), e.g. skx on any
        # AVX-512 CPU, zen3 on an AVX2-only Zen 3, haswell where BLIS knows no AVX2 CPU.
        self.assertIn(f"BLIS config {expected_blis_config(server_binary())},", log)

    def test_a_blis_configuration_the_user_set_wins(self):
        # BLIS_ARCH_TYPE takes the number of an arch_t: the one BLIS itself names
        # "generic", which the server would never choose on a CPU with AVX2.
        number = blis_config_number(server_binary(), "generic")
        server = self.start_with_env(BLIS_ARCH_TYPE=str(number))
        try:
            log = server.stderr_text()
        finally:
            server.stop(timeout=20)
        self.assertIn("BLIS config generic,", log)

    def matmul_through(self, server, datatype):
        """A prime-shaped MatMul of `datatype` through gRPC, against numpy in float64."""
        rng = np.random.default_rng(7)
        a = rng.standard_normal((13, 67)).astype(np.float32)
        b = rng.standard_normal((67, 31)).astype(np.float32)
        if datatype == "BF16":  # round to BF16 (keep the top 16 bits), then widen
            a, b = (np.frombuffer(((x.view(np.uint32) >> 16) << 16).tobytes(), np.float32)
                    .reshape(x.shape) for x in (a, b))
            payload = [(x.view(np.uint32) >> 16).astype(np.uint16).tobytes() for x in (a, b)]
        else:
            payload = [a.tobytes(), b.tobytes()]
        request = pb2.ModelInferRequest(model_name="matmul", raw_input_contents=payload)
        for name, x in (("A", a), ("B", b)):
            request.inputs.add(name=name, datatype=datatype, shape=list(x.shape))
        channel = open_channel(server.address)
        try:
            reply = pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=60)
        finally:
            channel.close()
        raw = reply.raw_output_contents[0]
        if datatype == "BF16":
            got = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
            tolerance = 2e-2
        else:
            got = np.frombuffer(raw, np.float32)
            tolerance = 1e-4
        want = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=tolerance,
                                   atol=tolerance * np.abs(want).max())

    def test_a_cpu_isa_cap_runs_the_lower_kernels_and_blis_with_them(self):
        """GEMMSERVE_MAX_CPU_ISA (server/ops/kernels/cpu_features.h) lowers every kernel
        choice, BLIS's too, and the answers stay right."""
        if "BLIS_ARCH_TYPE" in os.environ:
            self.skipTest("BLIS_ARCH_TYPE is set in the test environment")
        caps = [cap for cap in isa_levels_below() if cap in ("avx2", "generic")]
        if not caps:
            self.skipTest(f"the CPU reaches only {highest_isa(cpu_flags())}: no lower kernels")
        for cap in caps:
            # The configuration BLIS's own choice and the capped flags call for: haswell
            # on Zen 5 and Intel, zen3 on Zen 4 under avx2; generic under generic.
            blis = expected_blis_config(server_binary(), cap)
            with self.subTest(cap=cap, blis=blis):
                server = ServerProcess(compute_threads=1,
                                       env={"GEMMSERVE_MAX_CPU_ISA": cap}).start()
                try:
                    for datatype in ("FP32", "BF16"):
                        self.matmul_through(server, datatype)
                    log = server.stderr_text()
                finally:
                    server.stop(timeout=20)
                self.assertIn(f"kernels {cap} (GEMMSERVE_MAX_CPU_ISA={cap}", log)
                self.assertIn(f"BLIS config {blis},", log)
                self.assertNotIn("BLIS config skx", log)

    def test_an_unknown_cpu_isa_cap_stops_the_server_with_its_name(self):
        server = ServerProcess(env={"GEMMSERVE_MAX_CPU_ISA": "avx1024"})
        with self.assertRaises(AssertionError) as failed:
            server.start()
        self.assertIn("exited with code 1", str(failed.exception))
        self.assertIn("GEMMSERVE_MAX_CPU_ISA='avx1024' is not one of", str(failed.exception))


class ShutdownTest(unittest.TestCase):

    def test_sigterm_after_serving_stops_the_server_with_exit_code_0(self):
        server = ServerProcess().start()
        try:
            channel = open_channel(server.address)
            stub = pb2_grpc.GRPCInferenceServiceStub(channel)
            a = np.ones((2, 2), np.float32)
            request = pb2.ModelInferRequest(model_name="matmul", raw_input_contents=[
                a.tobytes(), a.tobytes()])
            for name in ("A", "B"):
                request.inputs.add(name=name, datatype="FP32", shape=[2, 2])
            self.assertEqual(stub.ModelInfer(request, timeout=30).raw_output_contents[0],
                             np.full((2, 2), 2, np.float32).tobytes())
            channel.close()
        finally:
            server.stop(timeout=20)  # SIGTERM; raises unless the exit code is 0
        self.assertEqual(server.proc.returncode, 0)

    def test_f5_sigterm_drains_accepted_work_refuses_new_calls_and_exits_0(self):
        """SIGTERM with a long MatMul in flight: health turns NOT_SERVING, a new call gets
        UNAVAILABLE, the accepted call completes with the right answer, exit code 0."""
        server = ServerProcess("--shutdown_grace_seconds=60").start()
        channel = open_channel(server.address)
        try:
            stub = pb2_grpc.GRPCInferenceServiceStub(channel)
            n = 3072
            a = np.ones((n, n), np.float32)
            big = pb2.ModelInferRequest(model_name="matmul",
                                        raw_input_contents=[a.tobytes(), a.tobytes()])
            for name in ("A", "B"):
                big.inputs.add(name=name, datatype="FP32", shape=[n, n])
            accepted = stub.ModelInfer.future(big, timeout=120)
            # The server has it once its in-flight gauge says so.
            deadline = time.monotonic() + 60
            while "gemmserve_inflight_requests 1" not in _scrape(server.metrics_url):
                self.assertLess(time.monotonic(), deadline, "the call never arrived")
                self.assertFalse(accepted.done(), "the call ended before SIGTERM")
            server.proc.send_signal(signal.SIGTERM)
            check = channel.unary_unary(HEALTH_CHECK, request_serializer=identity,
                                        response_deserializer=identity)
            status = SERVING
            while status == SERVING:  # flips as soon as the signal thread runs
                self.assertLess(time.monotonic(), deadline, "health never turned NOT_SERVING")
                status = wire.values(check(b"", timeout=10), 1)[0]
            self.assertEqual(status, NOT_SERVING)
            small = pb2.ModelInferRequest(model_name="matmul", raw_input_contents=[
                a[:1, :1].tobytes(), a[:1, :1].tobytes()])
            for name in ("A", "B"):
                small.inputs.add(name=name, datatype="FP32", shape=[1, 1])
            with self.assertRaises(grpc.RpcError) as ctx:
                stub.ModelInfer(small, timeout=30)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertFalse(accepted.done(), "the accepted call ended before the checks")
            y = np.frombuffer(accepted.result(timeout=120).raw_output_contents[0], np.float32)
            self.assertEqual(float(y[0]), float(n))
            self.assertEqual(server.proc.wait(timeout=60), 0)
        finally:
            channel.close()
            server.stop(timeout=60)


def _scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


if __name__ == "__main__":
    unittest.main(verbosity=2)
