"""A small blocking client for gemmserve's gRPC API."""
import collections
import json

import grpc

from .tensors import decode_outputs, input_entries, make_infer_request, pb2, pb2_grpc

DEFAULT_URL = "127.0.0.1:8001"

# One answer of a stream: the request's id, its model, its outputs ({name: array}) or,
# when it failed, None and the server's message in `error`.
StreamAnswer = collections.namedtuple("StreamAnswer", "id model_name outputs error")


class GemmServeClient:
    """One channel to a server; infer() sends numpy arrays and returns numpy arrays.

        client = GemmServeClient("127.0.0.1:8001")
        y = client.infer("matmul", A=a, B=b)["Y"]
        y = client.infer("matmul", [("A", a), ("B", b)])["Y"]    # the same request
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

    def model_ready(self, name, version="", timeout=10.0):
        """ModelReady: False while the model loads, is unloaded, or (a sharded layer's router)
        a shard has no ready replica."""
        return self.stub.ModelReady(pb2.ModelReadyRequest(name=name, version=version),
                                    timeout=timeout).ready

    def model_metadata(self, name, timeout=10.0):
        return self.stub.ModelMetadata(pb2.ModelMetadataRequest(name=name), timeout=timeout)

    def load_model(self, name, config=None, files=None, timeout=120.0):
        """Loads (or reloads) `name` from the repository, as tritonclient's load_model:
        `config` a dict (sent as Triton's JSON form of a ModelConfig) or text (that JSON, or
        config.pbtxt); `files` {"1/model.onnx": bytes, ...} uploads the model's files.
        A refusal raises grpc.RpcError."""
        request = pb2.RepositoryModelLoadRequest(model_name=name)
        if config is not None:
            request.parameters["config"].string_param = (
                config if isinstance(config, str) else json.dumps(config))
        for path, data in (files or {}).items():
            request.parameters["file:" + path].bytes_param = data
        self.stub.RepositoryModelLoad(request, timeout=timeout)

    def unload_model(self, name, timeout=60.0):
        self.stub.RepositoryModelUnload(pb2.RepositoryModelUnloadRequest(model_name=name),
                                        timeout=timeout)

    def model_config(self, name, timeout=10.0):
        return self.stub.ModelConfig(pb2.ModelConfigRequest(name=name), timeout=timeout).config

    def trace_settings(self, model=None, timeout=10.0, **settings):
        """Triton's trace settings (global, or `model`'s) as {key: [values]}, after changing
        those given: trace_settings(trace_level=["TIMESTAMPS"], trace_rate="100"); a value
        of None or [] clears the key, a string is one value."""
        request = pb2.TraceSettingRequest(model_name=model or "")
        for key, value in settings.items():
            entry = request.settings[key]
            if value is not None:
                entry.value.extend([value] if isinstance(value, str) else [str(v) for v in value])
        response = self.stub.TraceSetting(request, timeout=timeout)
        return {key: list(value.value) for key, value in response.settings.items()}

    def infer(self, model_name, inputs=None, outputs=None, *, typed=False, timeout=60.0,
              datatypes=None, **arrays):
        """Runs one inference and returns {output name: numpy array}.

        Inputs are keyword arrays, `infer("matmul", A=a, B=b)`, or (as before) a list of
        (name, array[, datatype]) or a dict {name: array} in `inputs`; the forms combine.
        An input named like a parameter of this method (model_name, inputs, outputs,
        typed, timeout, datatypes) goes in the dict. BF16 inputs are uint16 bit patterns
        marked with bf16(bits) or named in `datatypes={"A": "BF16"}`; BF16 outputs come
        back as uint16 bits. See make_infer_request for `outputs` and `typed`. A failed
        call raises grpc.RpcError, whose code() is the server's status code.
        """
        entries = input_entries(inputs, arrays, datatypes)
        request = make_infer_request(model_name, entries, outputs, typed=typed)
        return decode_outputs(self.stub.ModelInfer(request, timeout=timeout))

    def stream_infer(self, calls, *, timeout=None, metadata=None):
        """Sends inferences over one ModelStreamInfer stream; yields a StreamAnswer per
        request as each completes (not necessarily in the order sent: match them by id).

        `calls` is an iterable (it may be a generator that waits) of (model_name, inputs)
        or (model_name, inputs, id) tuples, inputs as infer() takes them in `inputs`, or of
        ready ModelInferRequest messages. A failed request comes back as an answer with
        `error` set and the stream goes on; the stream itself failing (a bad token, the
        server shutting down) raises grpc.RpcError. `metadata`: e.g.
        [("authorization", "Bearer <token>")], checked once for the stream.

            answers = client.stream_infer(("matmul", {"A": a, "B": b}, str(i)) for i in range(8))
            for answer in answers:
                print(answer.id, answer.error or answer.outputs["Y"].shape)
        """
        def requests():
            for call in calls:
                if isinstance(call, pb2.ModelInferRequest):
                    yield call
                    continue
                model_name, inputs, *rest = call
                request = make_infer_request(model_name, input_entries(inputs, {}, None))
                if rest:
                    request.id = str(rest[0])
                yield request

        for response in self.stub.ModelStreamInfer(requests(), timeout=timeout,
                                                   metadata=metadata):
            answer = response.infer_response
            if response.error_message:
                yield StreamAnswer(answer.id, answer.model_name, None, response.error_message)
            else:
                yield StreamAnswer(answer.id, answer.model_name, decode_outputs(answer), None)
