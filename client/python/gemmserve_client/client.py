"""A small blocking client for gemmserve's gRPC API."""
import grpc

from .tensors import decode_outputs, make_infer_request, pb2, pb2_grpc

DEFAULT_URL = "127.0.0.1:8001"


class GemmServeClient:
    """One channel to a server; infer() sends numpy arrays and returns numpy arrays.

        client = GemmServeClient("127.0.0.1:8001")
        y = client.infer("matmul", [("A", a), ("B", b)])["Y"]
    """

    def __init__(self, url=DEFAULT_URL, max_message_bytes=1 << 30):
        # Python's default receive limit (4 MiB) is far below the server's.
        options = [("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.max_receive_message_length", max_message_bytes)]
        self.channel = grpc.insecure_channel(url, options=options)
        self.stub = pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def wait_ready(self, timeout=10.0):
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    def server_live(self, timeout=10.0):
        return self.stub.ServerLive(pb2.ServerLiveRequest(), timeout=timeout).live

    def model_metadata(self, name, timeout=10.0):
        return self.stub.ModelMetadata(pb2.ModelMetadataRequest(name=name), timeout=timeout)

    def infer(self, model_name, inputs, outputs=None, *, typed=False, timeout=60.0):
        """Runs one inference; see make_infer_request for `inputs` and `outputs`."""
        request = make_infer_request(model_name, inputs, outputs, typed=typed)
        return decode_outputs(self.stub.ModelInfer(request, timeout=timeout))
