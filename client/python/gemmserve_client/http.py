"""A client for gemmserve's HTTP/REST API (the KServe v2 REST binding) on
Python's standard library (http.client) and numpy: no generated stubs.

    from gemmserve_client.http import HttpClient
    with HttpClient("http://127.0.0.1:8000") as client:
        client.ready()                                    # True / False
        y = client.infer("matmul", [("A", a), ("B", b)])["Y"]
        y = client.infer("matmul", [("A", a), ("B", b)], binary=False)["Y"]  # JSON numbers

Tensors travel in Triton's binary tensor extension by default (raw
little-endian bytes after the JSON header), or as JSON numbers with
binary=False. BF16 arrays are uint16 bit patterns: pass ("A", bits, "BF16").
Errors raise HttpError with the HTTP status and the server's message.
"""
import base64
import http.client
import json
import urllib.parse

import numpy as np

DTYPE_OF = {"FP32": "<f4", "FP64": "<f8", "FP16": "<f2", "BF16": "<u2", "INT32": "<i4",
            "INT64": "<i8", "UINT32": "<u4", "UINT64": "<u8"}
_DATATYPE_OF = {np.dtype(v): k for k, v in DTYPE_OF.items() if k != "BF16"}


class HttpError(Exception):
    def __init__(self, status, message):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


def _datatype(array, datatype):
    if datatype:
        return datatype
    found = _DATATYPE_OF.get(np.dtype(array.dtype).newbyteorder("<"))
    if found is None:
        raise TypeError(f"no KServe datatype for {array.dtype}; give one, e.g. ('A', a, 'FP32')")
    return found


def encode_infer_request(inputs, outputs=None, binary=True, binary_outputs=None, id=None,
                         parameters=None):
    """(body bytes, header length or None) of an inference request. `inputs`:
    [(name, array[, datatype])]; `binary_outputs`: ask for binary outputs
    (default: as `binary`)."""
    binary_outputs = binary if binary_outputs is None else binary_outputs
    header = {"inputs": []}
    if id is not None:
        header["id"] = id
    params = dict(parameters or {})
    if binary_outputs and outputs is None:
        params["binary_data_output"] = True
    if params:
        header["parameters"] = params
    if outputs is not None:
        header["outputs"] = [{"name": o, "parameters": {"binary_data": bool(binary_outputs)}}
                             for o in outputs]
    blobs = []
    for entry in inputs:
        name, array = entry[0], np.asarray(entry[1])
        datatype = _datatype(array, entry[2] if len(entry) > 2 else None)
        tensor = {"name": name, "shape": list(array.shape), "datatype": datatype}
        if binary:
            raw = np.ascontiguousarray(array, dtype=DTYPE_OF[datatype]).tobytes()
            tensor["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            values = array
            if datatype == "BF16":  # bit patterns to their values
                values = (array.astype(np.uint32) << 16).view(np.float32)
            tensor["data"] = values.reshape(-1).tolist()
        header["inputs"].append(tensor)
    text = json.dumps(header, separators=(",", ":")).encode()
    if not binary:
        return text, None
    return text + b"".join(blobs), len(text)


def decode_infer_response(body, header_length=None):
    """{output name: array} of a response body (BF16 as uint16 bit patterns)."""
    size = len(body) if header_length is None else int(header_length)
    header = json.loads(body[:size])
    out, offset = {}, size
    for o in header["outputs"]:
        dtype, shape = np.dtype(DTYPE_OF[o["datatype"]]), tuple(o["shape"])
        binary_size = o.get("parameters", {}).get("binary_data_size")
        if binary_size is not None:
            array = np.frombuffer(body[offset:offset + binary_size], dtype=dtype).reshape(shape)
            offset += binary_size
        elif o["datatype"] == "BF16":
            values = np.array(o["data"], dtype=np.float32)
            array = (values.view(np.uint32) >> 16).astype(np.uint16).reshape(shape)
        else:
            array = np.array(o["data"], dtype=dtype).reshape(shape)
        out[o["name"]] = array
    return out


class HttpClient:
    """`ssl_context`: an ssl.SSLContext for https:// URLs (the CA to trust, a client
    certificate for mutual TLS); default: the system's trust store."""

    def __init__(self, url="http://127.0.0.1:8000", token=None, timeout=60.0, ssl_context=None):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https"):
            raise ValueError(f"expected an http:// or https:// URL, got {url!r}")
        if parsed.scheme == "https":
            self._conn = http.client.HTTPSConnection(parsed.hostname, parsed.port or 8000,
                                                     timeout=timeout, context=ssl_context)
        else:
            self._conn = http.client.HTTPConnection(parsed.hostname, parsed.port or 8000,
                                                    timeout=timeout)
        self._token = token

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._conn.close()

    def request(self, method, path, body=None, headers=None):
        """(status, headers, body bytes) of one call on the kept-alive connection."""
        headers = dict(headers or {})
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if body is not None and "Content-Type" not in headers:
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            try:
                self._conn.request(method, path, body=body, headers=headers)
                response = self._conn.getresponse()
                return response.status, dict(response.getheaders()), response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A kept-alive connection the server closed (idle too long): once more
                # on a new one. The server answered nothing, so nothing ran twice.
                self._conn.close()
                if attempt:
                    raise
            except (http.client.HTTPException, OSError):
                self._conn.close()  # the next call opens a new connection
                raise

    def _json(self, method, path, body=None):
        status, _, data = self.request(method, path, body)
        if status != 200:
            raise HttpError(status, _message(data))
        return json.loads(data) if data else None

    def live(self):
        return self.request("GET", "/v2/health/live")[0] == 200

    def ready(self):
        return self.request("GET", "/v2/health/ready")[0] == 200

    def server_metadata(self):
        return self._json("GET", "/v2")

    def model_metadata(self, model, version=""):
        return self._json("GET", _model_path(model, version))

    def model_config(self, model, version=""):
        return self._json("GET", _model_path(model, version) + "/config")

    def model_statistics(self, model="", version=""):
        return self._json("GET", (_model_path(model, version) if model else "/v2/models") + "/stats")

    def repository_index(self, ready=False):
        return self._json("POST", "/v2/repository/index", json.dumps({"ready": ready}).encode())

    def load_model(self, model, config=None, files=None):
        """Loads (or reloads) `model` from the repository, as tritonclient's load_model:
        `config` a dict (sent as Triton's JSON form of a ModelConfig) or text (that JSON, or
        config.pbtxt); `files` {"1/model.onnx": bytes, ...} uploads the model's files."""
        parameters = {}
        if config is not None:
            parameters["config"] = config if isinstance(config, str) else json.dumps(config)
        for path, data in (files or {}).items():
            parameters["file:" + path] = base64.b64encode(data).decode()
        body = json.dumps({"parameters": parameters}).encode()
        self._json("POST", "/v2/repository/models/" + urllib.parse.quote(model, safe="")
                   + "/load", body)

    def unload_model(self, model):
        self._json("POST", "/v2/repository/models/" + urllib.parse.quote(model, safe="")
                   + "/unload", b"{}")

    def trace_settings(self, model=None, **settings):
        """Triton's trace settings (global, or `model`'s), after changing those given:
        trace_settings(trace_level=["TIMESTAMPS"], trace_rate="100"); None clears a key."""
        path = (_model_path(model, "") if model else "/v2") + "/trace/setting"
        if not settings:
            return self._json("GET", path)
        return self._json("POST", path, json.dumps(settings).encode())

    def log_settings(self, **settings):
        """Triton's log settings, after changing those given (log_info=False, ...)."""
        if not settings:
            return self._json("GET", "/v2/logging")
        return self._json("POST", "/v2/logging", json.dumps(settings).encode())

    def infer(self, model, inputs, outputs=None, binary=True, version="", **kwargs):
        """{output name: array}; see encode_infer_request for the arguments."""
        body, header_length = encode_infer_request(inputs, outputs, binary, **kwargs)
        headers = {}
        if header_length is not None:
            headers["Inference-Header-Content-Length"] = str(header_length)
            headers["Content-Type"] = "application/octet-stream"
        status, response_headers, data = self.request(
            "POST", _model_path(model, version) + "/infer", body, headers)
        if status != 200:
            raise HttpError(status, _message(data))
        return decode_infer_response(
            data, {k.lower(): v for k, v in response_headers.items()}.get(
                "inference-header-content-length"))


def _model_path(model, version):
    path = "/v2/models/" + urllib.parse.quote(model, safe="")
    return path + ("/versions/" + urllib.parse.quote(version, safe="") if version else "")


def _message(data):
    try:
        return json.loads(data)["error"]
    except (ValueError, KeyError, TypeError):
        return data.decode("utf-8", "replace")
