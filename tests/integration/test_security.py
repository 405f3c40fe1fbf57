"""TLS, mutual TLS and bearer tokens through the real server, with
certificates made by openssl at test time: plaintext to a TLS port fails, a
client without a certificate is refused under mutual TLS, a missing or wrong
token gets UNAUTHENTICATED (and the message never echoes it), health works
without one. Each over gRPC and over the HTTP front end (HTTPS on the same
certificates)."""
import http.client
import os
import shutil
import ssl
import subprocess
import tempfile
import unittest

import grpc
import numpy as np

from gemmserve_client import decode_outputs, make_infer_request, pb2, pb2_grpc
from gemmserve_client.http import HttpClient
from gemmserve_testing import wire
from gemmserve_testing.base import serve_with_tokens
from gemmserve_testing.server import ServerProcess

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVING = 1


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(directory):
    """A CA, a server certificate for 127.0.0.1/localhost, and a client certificate."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
            "/CN=gemmserve test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=directory)
    with open(os.path.join(directory, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, ext in (("server", ["-extfile", "server.ext"]), ("client", [])):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=directory)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "1", "-out", f"{name}.pem", *ext, cwd=directory)


def read(directory, name):
    with open(os.path.join(directory, name), "rb") as f:
        return f.read()


def matmul_request():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    return make_infer_request("matmul", [("A", a), ("B", a.T.copy())]), a @ a.T


def health(channel):
    check = channel.unary_unary(HEALTH_CHECK, request_serializer=lambda x: x,
                                response_deserializer=lambda x: x)
    return wire.values(check(b"", timeout=10), 1)[0]


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="gemmserve-tls-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        make_certificates(cls.dir)

    def start(self, *flags):
        server = ServerProcess(*flags).start()
        self.addCleanup(server.stop)
        return server

    def https_context(self, client_cert=False):
        context = ssl.create_default_context(cafile=os.path.join(self.dir, "ca.pem"))
        if client_cert:
            context.load_cert_chain(os.path.join(self.dir, "client.pem"),
                                    os.path.join(self.dir, "client.key"))
        return context

    def secure_channel(self, server, client_cert=False):
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(self.dir, "ca.pem"),
            private_key=read(self.dir, "client.key") if client_cert else None,
            certificate_chain=read(self.dir, "client.pem") if client_cert else None)
        channel = grpc.secure_channel(server.address, creds)
        self.addCleanup(channel.close)
        return channel

    def test_tls_serves_secure_clients_and_refuses_plaintext(self):
        server = self.start(f"--tls_cert={self.dir}/server.pem", f"--tls_key={self.dir}/server.key")
        request, want = matmul_request()
        stub = pb2_grpc.GRPCInferenceServiceStub(self.secure_channel(server))
        y = decode_outputs(stub.ModelInfer(request, timeout=30))["Y"]
        np.testing.assert_array_equal(y, want)
        plain = grpc.insecure_channel(server.address)
        self.addCleanup(plain.close)
        with self.assertRaises(grpc.RpcError) as ctx:
            pb2_grpc.GRPCInferenceServiceStub(plain).ModelInfer(request, timeout=5)
        self.assertIn(ctx.exception.code(), (grpc.StatusCode.UNAVAILABLE,
                                             grpc.StatusCode.DEADLINE_EXCEEDED))
        # The HTTP front end serves HTTPS with the same certificate, and refuses
        # plaintext HTTP on its port.
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        with HttpClient(f"https://127.0.0.1:{server.http_port}",
                        ssl_context=self.https_context()) as https:
            self.assertTrue(https.ready())
            for binary in (True, False):
                np.testing.assert_array_equal(
                    https.infer("matmul", [("A", a), ("B", a.T.copy())], binary=binary)["Y"], want)
        with HttpClient(server.http_url, timeout=10) as plain_http:
            with self.assertRaises((OSError, http.client.HTTPException)):
                plain_http.ready()
        server.assert_alive()

    def test_mutual_tls_refuses_a_client_without_a_certificate(self):
        server = self.start(f"--tls_cert={self.dir}/server.pem", f"--tls_key={self.dir}/server.key",
                            f"--tls_client_ca={self.dir}/ca.pem")
        request, want = matmul_request()
        with self.assertRaises(grpc.RpcError) as ctx:
            pb2_grpc.GRPCInferenceServiceStub(self.secure_channel(server)).ModelInfer(
                request, timeout=5)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE)
        stub = pb2_grpc.GRPCInferenceServiceStub(self.secure_channel(server, client_cert=True))
        np.testing.assert_array_equal(decode_outputs(stub.ModelInfer(request, timeout=30))["Y"],
                                      want)
        # Over HTTPS likewise: the handshake fails without a client certificate.
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        with HttpClient(f"https://127.0.0.1:{server.http_port}",
                        ssl_context=self.https_context()) as anonymous:
            with self.assertRaises((ssl.SSLError, ConnectionResetError, BrokenPipeError,
                                    http.client.RemoteDisconnected)):
                anonymous.ready()
        with HttpClient(f"https://127.0.0.1:{server.http_port}",
                        ssl_context=self.https_context(client_cert=True)) as https:
            np.testing.assert_array_equal(
                https.infer("matmul", [("A", a), ("B", a.T.copy())])["Y"], want)
        server.assert_alive()

    def test_a_bad_certificate_path_stops_start_up_with_a_clear_error(self):
        with self.assertRaises(AssertionError) as ctx:
            ServerProcess(f"--tls_cert={self.dir}/missing.pem",
                          f"--tls_key={self.dir}/server.key").start()
        self.assertIn("--tls_cert: cannot read", str(ctx.exception))


class TokenTest(unittest.TestCase):
    TOKEN = "s3cret-token-0123456789"

    @classmethod
    def setUpClass(cls):
        serve_with_tokens(cls, f"# tokens\n{cls.TOKEN}\nother-token\n")

    def call(self, rpc, request, token):
        metadata = None if token is None else (("authorization", f"Bearer {token}"),)
        return rpc(request, timeout=30, metadata=metadata)

    def test_missing_or_wrong_token_is_unauthenticated_and_never_echoed(self):
        request, want = matmul_request()
        for token in (None, "wrong-token", self.TOKEN + "x", ""):
            with self.subTest(token=token):
                with self.assertRaises(grpc.RpcError) as ctx:
                    self.call(self.stub.ModelInfer, request, token)
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
                if token:
                    self.assertNotIn(token, ctx.exception.details())
        with self.assertRaises(grpc.RpcError) as ctx:
            self.call(self.stub.ModelMetadata, pb2.ModelMetadataRequest(name="matmul"), None)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        y = decode_outputs(self.call(self.stub.ModelInfer, request, self.TOKEN))["Y"]
        np.testing.assert_array_equal(y, want)
        self.assertNotIn(self.TOKEN, self.server.stderr_text())

    def test_the_token_is_checked_before_a_message_is_parsed(self):
        # Bytes that are no message at all: a caller without the token is told so,
        # not what is wrong with its message (nothing was held or parsed for it).
        for method in ("ModelInfer", "RepositoryModelLoad"):
            with self.subTest(method=method):
                raw = self.channel.unary_unary(f"/inference.GRPCInferenceService/{method}",
                                               request_serializer=lambda b: b,
                                               response_deserializer=lambda b: b)
                with self.assertRaises(grpc.RpcError) as ctx:
                    raw(b"\xff" * 64, timeout=30)
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED,
                                 ctx.exception.details())
                with self.assertRaises(grpc.RpcError) as ctx:
                    raw(b"\xff" * 64, timeout=30,
                        metadata=(("authorization", f"Bearer {self.TOKEN}"),))
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                                 ctx.exception.details())
                self.assertIn("is not an inference.", ctx.exception.details())

    def test_health_needs_no_token(self):
        self.assertEqual(health(self.channel), SERVING)
        self.assertTrue(self.stub.ServerLive(pb2.ServerLiveRequest(), timeout=10).live)
        # ModelReady too, as Triton counts it with the health checks, over both protocols.
        self.assertTrue(self.stub.ModelReady(pb2.ModelReadyRequest(name="matmul"), timeout=10).ready)
        self.assertFalse(self.stub.ModelReady(pb2.ModelReadyRequest(name="nobody"),
                                              timeout=10).ready)
        with HttpClient(self.server.http_url) as client:
            self.assertEqual(client.request("GET", "/v2/models/matmul/ready")[0], 200)
            self.assertEqual(client.request("GET", "/v2/models/matmul/versions/1/ready")[0], 200)
            self.assertEqual(client.request("GET", "/v2/models/matmul")[0], 401)


if __name__ == "__main__":
    unittest.main(verbosity=2)
