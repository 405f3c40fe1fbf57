"""Every RPC of grpc_service.proto and every REST route of Triton's HTTP API is served,
or refused as Triton refuses it (CUDA shared memory: UNIMPLEMENTED / 501). A new RPC in
the proto, or a route that falls through to "no such endpoint", fails here."""
import json
import unittest

import grpc

from gemmserve_client import pb2
from gemmserve_client.http import HttpClient
from gemmserve_testing.base import GemmServeTestCase

SERVICE = "inference.GRPCInferenceService"
CUDA_RPCS = {"CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister"}
SERVED_RPCS = {
    "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer",
    "ModelStreamInfer", "ModelConfig", "ModelStatistics", "RepositoryIndex",
    "RepositoryModelLoad", "RepositoryModelUnload", "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister", "TraceSetting",
    "LogSettings"}

# (method, path, body): Triton's REST routes, each with a request it may refuse on its
# merits but must route.
ROUTES = [
    ("GET", "/v2/health/live", None), ("GET", "/v2/health/ready", None), ("GET", "/v2", None),
    ("GET", "/v2/models/matmul", None), ("GET", "/v2/models/matmul/versions/1", None),
    ("GET", "/v2/models/matmul/ready", None), ("GET", "/v2/models/matmul/versions/1/ready", None),
    ("GET", "/v2/models/matmul/config", None), ("GET", "/v2/models/matmul/versions/1/config", None),
    ("GET", "/v2/models/stats", None), ("GET", "/v2/models/matmul/stats", None),
    ("GET", "/v2/models/matmul/versions/1/stats", None),
    ("POST", "/v2/models/matmul/infer", b"{}"), ("POST", "/v2/models/matmul/versions/1/infer", b"{}"),
    ("POST", "/v2/repository/index", b"{}"),
    ("POST", "/v2/repository/models/nothing/load", b"{}"),
    ("POST", "/v2/repository/models/nothing/unload", b"{}"),
    ("GET", "/v2/systemsharedmemory/status", None),
    ("GET", "/v2/systemsharedmemory/region/r/status", None),
    ("POST", "/v2/systemsharedmemory/region/r/register", b"{}"),
    ("POST", "/v2/systemsharedmemory/unregister", b"{}"),
    ("POST", "/v2/systemsharedmemory/region/r/unregister", b"{}"),
    ("GET", "/v2/logging", None), ("POST", "/v2/logging", b"{}"),
    ("GET", "/v2/trace/setting", None), ("POST", "/v2/trace/setting", b"{}"),
    ("GET", "/v2/models/matmul/trace/setting", None),
    ("POST", "/v2/models/matmul/trace/setting", b"{}"),
]
CUDA_ROUTES = [
    ("GET", "/v2/cudasharedmemory/status", None),
    ("POST", "/v2/cudasharedmemory/region/r/register", b"{}"),
    ("POST", "/v2/cudasharedmemory/unregister", b"{}"),
]


class ApiSurfaceTest(GemmServeTestCase):

    def call(self, method):
        """Calls `method` with an empty request; the status code it ended with."""
        request = pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"] \
            .methods_by_name[method].input_type
        message = getattr(pb2, request.name)()
        path = f"/{SERVICE}/{method}"
        try:
            if method == "ModelStreamInfer":
                call = self.channel.stream_stream(
                    path, request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=pb2.ModelStreamInferResponse.FromString)
                list(call(iter([]), timeout=10))
            else:
                call = self.channel.unary_unary(path,
                                                request_serializer=lambda m: m.SerializeToString(),
                                                response_deserializer=lambda b: b)
                call(message, timeout=10)
        except grpc.RpcError as error:
            return error.code()
        return grpc.StatusCode.OK

    def test_every_rpc_is_served_or_refused_as_triton_refuses_it(self):
        methods = set(pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name)
        self.assertEqual(methods, SERVED_RPCS | CUDA_RPCS,
                         "grpc_service.proto changed: serve the new RPC, then list it here")
        for method in sorted(methods):
            with self.subTest(rpc=method):
                code = self.call(method)
                if method in CUDA_RPCS:
                    self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED)
                else:
                    self.assertNotEqual(code, grpc.StatusCode.UNIMPLEMENTED)
        self.server.assert_alive()

    def test_every_rest_route_is_served(self):
        with HttpClient(self.server.http_url) as http:
            for method, path, body in ROUTES + CUDA_ROUTES:
                with self.subTest(route=f"{method} {path}"):
                    status, _, data = http.request(method, path, body)
                    answer = json.loads(data) if data else {}
                    error = answer.get("error", "") if isinstance(answer, dict) else ""
                    self.assertNotIn("no such endpoint", error)
                    self.assertNotEqual(status, 405, error)
                    if (method, path, body) in CUDA_ROUTES:
                        self.assertEqual(status, 501, error)
                    else:
                        self.assertNotEqual(status, 501, error)
            status, _, data = http.request("GET", "/v2/no/such/route")
            self.assertEqual(status, 404)
            self.assertIn("no such endpoint", json.loads(data)["error"])


if __name__ == "__main__":
    unittest.main()
