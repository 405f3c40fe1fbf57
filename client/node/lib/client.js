'use strict';
// gemmserve-client: a small promise-based client for gemmserve's KServe v2 gRPC API,
// on @grpc/grpc-js, with the protocol loaded at run time from grpc_service.proto.
// HttpClient (http.js, exported here too) makes the same calls over HTTP/REST.
//
// Tensors are {datatype, shape, data} with data a typed array (see tensors.js):
// Float32Array for FP32, Int32Array for INT32, BigInt64Array for INT64, ...,
// and Uint16Array bit patterns for FP16 and BF16. Every call returns a promise;
// a failed RPC rejects with @grpc/grpc-js's error, whose `code` is the gRPC
// status (compare with `status.INVALID_ARGUMENT`) and `details` the server's message.
//
//   const { GemmServeClient } = require('gemmserve-client');
//   const client = new GemmServeClient('127.0.0.1:8001');
//   const { Y } = await client.infer('matmul', {
//     A: { datatype: 'FP32', shape: [2, 3], data: new Float32Array([1, 2, 3, 4, 5, 6]) },
//     B: { datatype: 'FP32', shape: [3, 1], data: new Float32Array([1, 1, 1]) },
//   });
//   // Y: { datatype: 'FP32', shape: [2, 1], data: Float32Array [6, 15] }
//   client.close();

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const tensors = require('./tensors');
const { HttpClient, HttpError } = require('./http');

const DEFAULT_URL = '127.0.0.1:8001';
// The repository's proto/ folder (this file is client/node/lib/client.js).
const DEFAULT_PROTO_DIR = path.resolve(__dirname, '..', '..', '..', 'proto');

const serviceCache = new Map();

// The GRPCInferenceService client class, loaded once per proto folder.
function loadService(protoDir) {
  let service = serviceCache.get(protoDir);
  if (!service) {
    const definition = protoLoader.loadSync('grpc_service.proto', {
      includeDirs: [protoDir],
      keepCase: true, // the protocol's own field names: raw_input_contents, ...
      longs: String, // int64 shapes come back exact; decodeOutputs checks their range
      enums: String,
      defaults: true,
      oneofs: true,
    });
    service = grpc.loadPackageDefinition(definition).inference.GRPCInferenceService;
    serviceCache.set(protoDir, service);
  }
  return service;
}

function deadlineOf(timeoutMs) {
  return timeoutMs === undefined || timeoutMs === Infinity ? Infinity : Date.now() + timeoutMs;
}

class GemmServeClient {
  // url: "host:port" or any gRPC target. Options:
  //   protoDir: the folder holding grpc_service.proto and model_config.proto
  //             (default: the repository's proto/; $GEMMSERVE_PROTO_DIR wins over it)
  //   credentials: grpc.ChannelCredentials (default insecure)
  //   maxMessageBytes: largest message sent or received (default: no limit; the
  //                    server enforces its own)
  // The channel connects lazily: a server that is down shows up as UNAVAILABLE
  // on the first call (or use waitForReady).
  constructor(url = DEFAULT_URL, options = {}) {
    tensors.assertLittleEndian();
    const protoDir = options.protoDir || process.env.GEMMSERVE_PROTO_DIR || DEFAULT_PROTO_DIR;
    const Service = loadService(protoDir);
    const limit = options.maxMessageBytes === undefined ? -1 : options.maxMessageBytes;
    this._stub = new Service(url, options.credentials || grpc.credentials.createInsecure(), {
      // grpc-js's default 4 MiB receive limit would reject most GEMM outputs.
      'grpc.max_receive_message_length': limit,
      'grpc.max_send_message_length': limit,
    });
  }

  close() {
    this._stub.close();
  }

  // Resolves once the channel is connected; rejects after timeoutMs.
  waitForReady(timeoutMs = 10000) {
    return new Promise((resolve, reject) => {
      this._stub.waitForReady(deadlineOf(timeoutMs),
                              (error) => (error ? reject(error) : resolve()));
    });
  }

  _call(method, request, timeoutMs) {
    return new Promise((resolve, reject) => {
      this._stub[method](request, { deadline: deadlineOf(timeoutMs) }, (error, response) =>
        error ? reject(error) : resolve(response));
    });
  }

  async serverLive({ timeoutMs } = {}) {
    return (await this._call('ServerLive', {}, timeoutMs)).live;
  }

  async serverReady({ timeoutMs } = {}) {
    return (await this._call('ServerReady', {}, timeoutMs)).ready;
  }

  async modelReady(name, { version = '', timeoutMs } = {}) {
    return (await this._call('ModelReady', { name, version }, timeoutMs)).ready;
  }

  // The ModelMetadataResponse as a plain object (name, versions, inputs, outputs).
  modelMetadata(name, { version = '', timeoutMs } = {}) {
    return this._call('ModelMetadata', { name, version }, timeoutMs);
  }

  // Runs `model` on `inputs` = {name: {datatype, shape, data}} and resolves to
  // {output name: {datatype, shape, data}}. datatype may be left out when the
  // typed array says it (Float32Array: FP32, BigInt64Array: INT64, ...; not
  // Uint16Array or Uint8Array). Options: timeoutMs (the call's deadline),
  // outputs (names of the outputs wanted; default all), version.
  // Malformed inputs reject with a TypeError or RangeError before anything is sent.
  async infer(model, inputs, { timeoutMs, outputs, version = '' } = {}) {
    const { tensors: inputTensors, raw } = tensors.encodeInputs(inputs);
    const request = {
      model_name: model,
      model_version: version,
      inputs: inputTensors,
      outputs: (outputs || []).map((name) => ({ name })),
      raw_input_contents: raw,
    };
    return tensors.decodeOutputs(await this._call('ModelInfer', request, timeoutMs));
  }
}

module.exports = {
  DEFAULT_URL,
  GemmServeClient,
  HttpClient, // the same calls over HTTP/REST (http.js)
  HttpError,
  bf16BitsToFloat32: tensors.bf16BitsToFloat32,
  float32ToBf16Bits: tensors.float32ToBf16Bits,
  status: grpc.status,
};
