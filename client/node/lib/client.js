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
//
// client.stream() opens Triton's bidirectional ModelStreamInfer: requests are
// sent with send() and answered as each completes, by id (see InferStream).

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

// A ModelInferRequest for `model` on `inputs` (as infer takes them); throws a
// TypeError or RangeError on malformed inputs.
function inferRequest(model, inputs, { id = '', outputs, version = '' } = {}) {
  const { tensors: inputTensors, raw } = tensors.encodeInputs(inputs);
  return {
    id,
    model_name: model,
    model_version: version,
    inputs: inputTensors,
    outputs: (outputs || []).map((name) => ({ name })),
    raw_input_contents: raw,
  };
}

// `metadata` as grpc.Metadata: one already, or a plain object {key: value or
// [values]} (strings; Buffers for keys ending in -bin).
function toMetadata(metadata) {
  if (metadata instanceof grpc.Metadata) return metadata;
  const result = new grpc.Metadata();
  if (metadata === undefined || metadata === null) return result;
  if (typeof metadata !== 'object') {
    throw new TypeError('metadata must be a grpc.Metadata or an object {key: value}');
  }
  for (const [key, value] of Object.entries(metadata)) {
    for (const one of Array.isArray(value) ? value : [value]) result.add(key, one);
  }
  return result;
}

// One ModelStreamInfer stream, from GemmServeClient.stream(). Requests go out
// with send() and come back, each as it completes (not necessarily in the
// order sent), through the async iterator as answers
//   {id, model, outputs, error}:
// id and model are the request's, outputs is {output name: tensor} as infer
// resolves to, and error null; or, when that request failed (bad inputs, an
// unknown model, ...), outputs is null and error the server's message, and the
// stream goes on. The stream itself failing (a missing or wrong token:
// UNAUTHENTICATED; the server shutting down: UNAVAILABLE, after the answers to
// what it had accepted; the deadline: DEADLINE_EXCEEDED) makes the iteration
// throw @grpc/grpc-js's error, with its `code`. The iteration ends normally
// once end() was called and every request is answered, or after cancel().
//
//   const stream = client.stream();
//   stream.send('matmul', { A: a, B: b }, { id: 'first' });
//   stream.send('grouped_matmul', { input, weights, group_indices }, { id: 'second' });
//   stream.end();
//   for await (const { id, outputs, error } of stream) console.log(id, error || outputs);
class InferStream {
  constructor(call) {
    this._call = call;
    this._sent = 0;
    this._closed = false; // end() or cancel() called: no more send()
    this._cancelled = false;
    this._iterated = false;
    this._status = null; // the stream's final status, once received
    this._error = null; // its error, unless OK
    // Always listened to: an error nobody iterates for must not be thrown as
    // an unhandled 'error' event. Iterating later still reports it.
    call.on('error', (error) => { if (!this._error) this._error = error; });
    call.on('status', (status) => { this._status = status; });
  }

  // Sends `model` on `inputs` ({name: tensor}, as infer takes them) and
  // returns the request's id, which its answer carries. Options: id (a
  // string; default the number of requests this stream sent before, as a
  // string: give every request its own id when mixing both), outputs (names
  // of the outputs wanted; default all), version. Malformed inputs throw a
  // TypeError or RangeError and nothing is sent; so does send() after end()
  // or cancel(). Requests the server has not read yet are buffered here.
  send(model, inputs, { id, outputs, version = '' } = {}) {
    const request = inferRequest(model, inputs, {
      id: id === undefined ? String(this._sent) : String(id), outputs, version,
    });
    this._write(request);
    return request.id;
  }

  _write(request) {
    if (this._closed) throw new Error('send() on a stream after its end() or cancel()');
    ++this._sent;
    this._call.write(request);
  }

  // Half-closes the stream: no more requests. The iteration ends once those
  // sent are answered.
  end() {
    if (this._closed) return;
    this._closed = true;
    this._call.end();
  }

  // Cancels the stream: the server drops the requests it has not answered
  // (those still queued are never computed). The iteration yields the answers
  // already received, then ends without an error.
  cancel() {
    this._closed = true;
    this._cancelled = true;
    this._call.cancel();
  }

  // The answers, as they arrive; once per stream. Leaving the loop early
  // (break, return, a throw) cancels the stream.
  async* [Symbol.asyncIterator]() {
    if (this._iterated) throw new Error('a stream\'s answers can be iterated only once');
    this._iterated = true;
    let failure = null;
    try {
      for await (const response of this._call) yield InferStream._answer(response);
    } catch (error) {
      failure = error;
    } finally {
      // Not ended by the server: the caller left the loop, or decoding failed.
      if (!this._status) this.cancel();
    }
    // The loop also ends quietly when the error came before the iteration began.
    failure = failure || this._error;
    if (failure && !(this._cancelled && failure.code === grpc.status.CANCELLED)) throw failure;
  }

  // A ModelStreamInferResponse -> {id, model, outputs, error}. A malformed
  // answer (outputs not filling their shapes) throws, as infer rejects.
  static _answer(response) {
    const answer = response.infer_response || {};
    const base = { id: answer.id || '', model: answer.model_name || '' };
    if (response.error_message) return { ...base, outputs: null, error: response.error_message };
    return { ...base, outputs: tensors.decodeOutputs(answer), error: null };
  }
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

  // Triton's ModelConfig of the model as a plain object ({name, input, output,
  // parameters: {key: {string_value}}, ...}; int64 fields such as dims as strings).
  async modelConfig(name, { version = '', timeoutMs } = {}) {
    return (await this._call('ModelConfig', { name, version }, timeoutMs)).config;
  }

  // Runs `model` on `inputs` = {name: {datatype, shape, data}} and resolves to
  // {output name: {datatype, shape, data}}. datatype may be left out when the
  // typed array says it (Float32Array: FP32, BigInt64Array: INT64, ...; not
  // Uint16Array or Uint8Array). Options: timeoutMs (the call's deadline),
  // outputs (names of the outputs wanted; default all), version.
  // Malformed inputs reject with a TypeError or RangeError before anything is sent.
  async infer(model, inputs, { timeoutMs, outputs, version = '' } = {}) {
    const request = inferRequest(model, inputs, { outputs, version });
    return tensors.decodeOutputs(await this._call('ModelInfer', request, timeoutMs));
  }

  // Opens a ModelStreamInfer stream and returns its InferStream: send(model,
  // inputs, {id, outputs, version}), end(), cancel(), and `for await (const
  // {id, model, outputs, error} of stream)` (see InferStream above). Options:
  // metadata (a grpc.Metadata or {key: value}, sent once with the stream: the
  // server checks `authorization: 'Bearer <token>'` from it), timeoutMs (the
  // whole stream's deadline). Only metadata of the wrong type throws here (a
  // TypeError): a stream the server refuses makes the iteration throw.
  stream({ metadata, timeoutMs } = {}) {
    const call = this._stub.ModelStreamInfer(toMetadata(metadata),
                                             { deadline: deadlineOf(timeoutMs) });
    return new InferStream(call);
  }

  // Sends `calls`, an array of {model, inputs, id, outputs, version} (as
  // send takes them), over one stream and resolves to their answers
  // {id, model, outputs, error} in the order of `calls`. ids default to the
  // call's index (as a string) and must differ. A failed request is an answer
  // with `error` set; the stream failing rejects with the gRPC error, and
  // malformed calls reject with a TypeError or RangeError before anything is
  // sent. Options: those of stream().
  async streamInfer(calls, options = {}) {
    if (!Array.isArray(calls)) {
      throw new TypeError('calls must be an array of {model, inputs, id, outputs, version}');
    }
    const index = new Map();
    const requests = calls.map((call, i) => {
      if (call === null || typeof call !== 'object') {
        throw new TypeError(`calls[${i}] must be {model, inputs, id, outputs, version}`);
      }
      const id = call.id === undefined ? String(i) : String(call.id);
      if (index.has(id)) throw new TypeError(`calls[${i}]: id '${id}' is used twice`);
      index.set(id, i);
      return inferRequest(call.model, call.inputs,
                          { id, outputs: call.outputs, version: call.version });
    });
    const stream = this.stream(options);
    for (const request of requests) stream._write(request);
    stream.end();
    const answers = new Array(calls.length).fill(null);
    for await (const answer of stream) {
      const i = index.get(answer.id);
      if (i === undefined || answers[i] !== null) {
        throw new Error(`the server answered id '${answer.id}', which was not awaited`);
      }
      answers[i] = answer;
    }
    const missing = answers.filter((answer) => answer === null).length;
    if (missing > 0) throw new Error(`the stream ended with ${missing} requests unanswered`);
    return answers;
  }
}

module.exports = {
  DEFAULT_URL,
  GemmServeClient,
  InferStream, // what GemmServeClient.stream() returns
  HttpClient, // the same calls over HTTP/REST (http.js)
  HttpError,
  bf16BitsToFloat32: tensors.bf16BitsToFloat32,
  float32ToBf16Bits: tensors.float32ToBf16Bits,
  status: grpc.status,
};
