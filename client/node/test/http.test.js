'use strict';
// HttpClient against a live gemmserve's HTTP/REST port: health and model
// readiness, metadata and configuration, MatMul (FP32, INT64 and UINT64 beyond
// 2^53, BF16, FP16) and GroupedMatMul in binary and JSON, HttpErrors with the
// server's status and message, bearer tokens, byte-for-byte parity with the
// gRPC client, and examples/http_matmul.js.
//
// Run by ctest through test/run_test.sh (which installs the npm packages and
// sets NODE_PATH); by hand, after `npm ci` in client/node:
//   GEMMSERVE_BIN=build/bin/gemmserve node --test client/node/test/http.test.js

const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const httpServer = require('node:http');
const os = require('node:os');
const path = require('node:path');
const { after, before, describe, test } = require('node:test');

const {
  GemmServeClient, HttpClient, HttpError, bf16BitsToFloat32, float32ToBf16Bits,
} = require('..');
const { decodeInferResponse, encodeInferRequest, halfBitsToNumber, numberToHalfBits,
        parseExactJson } = require('../lib/http');
const { groupedMatmul, matmul, randomFloats } = require('./reference');
const { ServerProcess } = require('./server');

let server;
let http;
let grpc;

before(async () => {
  server = await new ServerProcess().start();
  http = new HttpClient(server.httpUrl, { timeoutMs: 30000 });
  grpc = new GemmServeClient(server.address);
  await grpc.waitForReady(10000);
});

after(async () => {
  if (grpc) grpc.close();
  if (server) {
    assert.equal(await server.stop(), 0, `gemmserve did not exit cleanly:\n${server.stderr}`);
  }
});

function bytesOf(tensor) {
  const { data } = tensor;
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

// Outputs equal in name, datatype, shape and every byte.
function assertSameOutputs(got, want, what) {
  assert.deepEqual(Object.keys(got), Object.keys(want), what);
  for (const name of Object.keys(want)) {
    assert.equal(got[name].datatype, want[name].datatype, `${what}: ${name}`);
    assert.deepEqual(got[name].shape, want[name].shape, `${what}: ${name}`);
    assert.equal(got[name].data.constructor, want[name].data.constructor, `${what}: ${name}`);
    assert.ok(bytesOf(got[name]).equals(bytesOf(want[name])), `${what}: ${name} bytes differ`);
  }
}

describe('health and metadata', () => {
  test('server live and ready', async () => {
    assert.equal(await http.serverLive(), true);
    assert.equal(await http.serverReady(), true);
  });

  test('model ready: true for served models, false for others', async () => {
    assert.equal(await http.modelReady('matmul'), true);
    assert.equal(await http.modelReady('grouped_matmul', '1'), true);
    assert.equal(await http.modelReady('grouped_matmul', { version: '1', timeoutMs: 5000 }), true);
    // The server answers 400 (not 404) for a model it does not serve.
    assert.equal(await http.modelReady('no_such_model'), false);
    assert.equal(await http.modelReady('matmul', '99'), false);
  });

  test('server metadata, model metadata, config, statistics, repository index', async () => {
    const server = await http.serverMetadata();
    assert.equal(server.name, 'gemmserve');
    assert.ok(server.extensions.includes('binary_tensor_data'), server.extensions);

    const matmulMeta = await http.modelMetadata('matmul');
    assert.equal(matmulMeta.name, 'matmul');
    assert.deepEqual(matmulMeta.inputs.map((t) => t.name), ['A', 'B']);
    assert.deepEqual(matmulMeta.outputs.map((t) => t.name), ['Y']);
    // The same metadata as over gRPC.
    const viaGrpc = await grpc.modelMetadata('grouped_matmul');
    const viaHttp = await http.modelMetadata('grouped_matmul', '1');
    assert.deepEqual(viaHttp.inputs.map((t) => [t.name, t.datatype]),
                     viaGrpc.inputs.map((t) => [t.name, t.datatype]));

    const config = await http.modelConfig('grouped_matmul');
    assert.equal(config.name, 'grouped_matmul');
    assert.deepEqual(config.input.map((t) => t.name),
                     ['input', 'weights', 'group_indices', 'bias']);

    const stats = await http.modelStatistics('matmul');
    assert.equal(stats.model_stats[0].name, 'matmul');

    const index = await http.repositoryIndex({ ready: true });
    const names = index.map((m) => m.name).sort();
    assert.ok(names.includes('matmul') && names.includes('grouped_matmul'), names);
  });
});

describe('matmul', () => {
  test('FP32, binary and JSON give the same floats', async () => {
    const [M, K, N] = [3, 5, 4];
    const a = randomFloats(M * K, 1);
    const b = randomFloats(K * N, 2);
    const inputs = { A: { shape: [M, K], data: a },
                     B: { datatype: 'FP32', shape: [K, N], data: b } };
    const binary = await http.infer('matmul', inputs);
    const json = await http.infer('matmul', inputs, { binary: false });
    const { Y } = binary;
    assert.equal(Y.datatype, 'FP32');
    assert.deepEqual(Y.shape, [M, N]);
    assert.ok(Y.data instanceof Float32Array);
    matmul(a, b, M, K, N).forEach((want, i) => assert.ok(Math.abs(Y.data[i] - want) <= 1e-5,
                                                         `Y[${i}] = ${Y.data[i]}, want ${want}`));
    assertSameOutputs(json, binary, 'JSON vs binary');
    // Binary inputs with a JSON response (the caller's binary_data_output wins).
    const mixed = await http.infer('matmul', inputs, { parameters: { binary_data_output: false } });
    assertSameOutputs(mixed, binary, 'binary request, JSON response');
  });

  test('FP32 special values survive JSON both ways', async () => {
    const a = Float32Array.from([Infinity, -Infinity, NaN, -0, 0.1, 3.4028234663852886e38,
                                 2 ** -149]);
    const inputs = { A: { shape: [7, 1], data: a },
                     B: { shape: [1, 1], data: Float32Array.of(1) } };
    const binary = await http.infer('matmul', inputs);
    const json = await http.infer('matmul', inputs, { binary: false });
    assert.deepEqual(json.Y.shape, [7, 1]);
    // Object.is: -0 is not 0, NaN is NaN. The product's -0 * 1 is summed onto a +0
    // (0 + -0 = +0), so Y's sign of zero is the kernel's: JSON must only agree with binary.
    a.forEach((v, i) => {
      const got = json.Y.data[i];
      assert.ok(Object.is(got, binary.Y.data[i]), `JSON Y[${i}] = ${got}, binary ` +
                                                  `${binary.Y.data[i]}`);
      assert.ok(Object.is(got, v) || (v === 0 && got === 0), `Y[${i}] = ${got}, want ${v}`);
    });
  });

  test('INT64 over JSON is exact beyond 2^53 and wraps like int64', async () => {
    const a = BigInt64Array.from([2n ** 62n + 1n, 3n, -(2n ** 61n) - 7n, 9007199254740993n]);
    const b = BigInt64Array.from([2n, -1n, 5n, 2n ** 40n + 3n]);
    const inputs = { A: { shape: [2, 2], data: a }, B: { shape: [2, 2], data: b } };
    const json = await http.infer('matmul', inputs, { binary: false });
    const { Y } = json;
    assert.equal(Y.datatype, 'INT64');
    assert.ok(Y.data instanceof BigInt64Array);
    const wrap = (x) => BigInt.asIntN(64, x);
    const want = matmul(a, b, 2, 2, 2, { zero: 0n, add: (x, y) => wrap(x + y),
                                         mul: (x, y) => wrap(x * y) });
    assert.deepEqual(Array.from(Y.data), want);
    assert.ok(want.some((v) => v > 2n ** 53n || v < -(2n ** 53n)), 'values beyond doubles');
    assertSameOutputs(await http.infer('matmul', inputs), json, 'binary vs JSON');
    // Plain Arrays of BigInts (and of safe numbers) go the same way.
    const fromArrays = await http.infer('matmul', {
      A: { datatype: 'INT64', shape: [2, 2], data: Array.from(a) },
      B: { datatype: 'INT64', shape: [2, 2], data: [2, -1, 5, 2 ** 40 + 3] },
    }, { binary: false });
    assertSameOutputs(fromArrays, json, 'Arrays vs BigInt64Arrays');
  });

  test('UINT64 over JSON keeps values up to 2^64 - 1', async () => {
    const a = BigUint64Array.from([2n ** 64n - 1n, 2n ** 63n + 5n]);
    const b = BigUint64Array.from([1n, 1n]);
    const { Y } = await http.infer('matmul', {
      A: { shape: [2, 1], data: a }, B: { shape: [1, 2], data: b },
    }, { binary: false });
    assert.ok(Y.data instanceof BigUint64Array);
    assert.deepEqual(Array.from(Y.data), [2n ** 64n - 1n, 2n ** 64n - 1n, 2n ** 63n + 5n,
                                          2n ** 63n + 5n]);
  });

  test('BF16 travels as Uint16Array bit patterns, binary and JSON', async () => {
    const a = Float32Array.from([1, 2, 3, 4, 5, 6]);
    const b = Float32Array.from([0.5, -1, 2, 0.25, 1, 1]);
    const inputs = {
      A: { datatype: 'BF16', shape: [2, 3], data: float32ToBf16Bits(a) },
      B: { datatype: 'BF16', shape: [3, 2], data: float32ToBf16Bits(b) },
    };
    const binary = await http.infer('matmul', inputs);
    assert.equal(binary.Y.datatype, 'BF16');
    assert.ok(binary.Y.data instanceof Uint16Array);
    assert.deepEqual(Array.from(bf16BitsToFloat32(binary.Y.data)), matmul(a, b, 2, 3, 2));
    assertSameOutputs(await http.infer('matmul', inputs, { binary: false }), binary, 'BF16 JSON');
    // Values that are not small integers: bits, not rounded floats, go through JSON.
    const r = float32ToBf16Bits(randomFloats(64, 3));
    const rounded = { A: { datatype: 'BF16', shape: [8, 8], data: r },
                      B: { datatype: 'BF16', shape: [8, 8], data: r } };
    assertSameOutputs(await http.infer('matmul', rounded, { binary: false }),
                      await http.infer('matmul', rounded), 'BF16 JSON, random');
  });

  test('FP16 bit patterns, binary and JSON', async () => {
    const bits = Uint16Array.from(randomFloats(48, 4), (v) => numberToHalfBits(v * 8));
    const inputs = { A: { datatype: 'FP16', shape: [6, 8], data: bits },
                     B: { datatype: 'FP16', shape: [8, 6], data: bits } };
    const binary = await http.infer('matmul', inputs);
    assert.equal(binary.Y.datatype, 'FP16');
    assertSameOutputs(await http.infer('matmul', inputs, { binary: false }), binary, 'FP16 JSON');
    assertSameOutputs(await grpc.infer('matmul', inputs), binary, 'FP16 gRPC');
  });
});

describe('grouped_matmul', () => {
  test('INT64 indices and bias, binary (named output) and JSON', async () => {
    const [M, K, N, G, S] = [3, 2, 2, 3, 2];
    const x = Float32Array.from([1, 2, 3, 4, 5, 6]);
    const w = Float32Array.from({ length: G * K * N }, (_, i) => i);
    const bias = Float32Array.from({ length: G * N }, (_, i) => 100 * i);
    const idx = BigInt64Array.from([2n, 0n, 1n, 1n, 0n, 2n]);
    const inputs = {
      input: { shape: [M, K], data: x },
      weights: { shape: [G, K, N], data: w },
      group_indices: { shape: [M, S], data: idx },
      bias: { shape: [G, N], data: bias },
    };
    const binary = await http.infer('grouped_matmul', inputs, { outputs: ['output'], id: 'g1' });
    const { output } = binary;
    assert.deepEqual(output.shape, [M, S, N]);
    const want = groupedMatmul(x, w, idx, bias, M, K, N, S);
    assert.deepEqual(Array.from(output.data), want);
    assertSameOutputs(await http.infer('grouped_matmul', inputs, { binary: false,
                                                                   outputs: ['output'] }),
                      binary, 'JSON vs binary');
    assertSameOutputs(await http.infer('grouped_matmul', inputs, { version: '1' }), binary,
                      'all outputs vs the named one');
  });
});

describe('parity with the gRPC client', () => {
  test('same inputs give identical output bytes over gRPC, HTTP binary and HTTP JSON',
       async () => {
    const cases = [
      ['matmul', {
        A: { shape: [2, 7, 16], data: randomFloats(2 * 7 * 16, 10) },
        B: { shape: [16, 9], data: randomFloats(16 * 9, 11) },
      }],
      ['matmul', {
        A: { datatype: 'BF16', shape: [5, 24], data: float32ToBf16Bits(randomFloats(120, 12)) },
        B: { datatype: 'BF16', shape: [24, 3], data: float32ToBf16Bits(randomFloats(72, 13)) },
      }],
      ['matmul', {
        A: { shape: [3, 3], data: Int32Array.from([2147483647, 3, -7, 65536, 1, -5, 9, 9, 9]) },
        B: { shape: [3, 2], data: Int32Array.from([2, -1, 65536, 5, 9, 1]) },
      }],
      ['matmul', {
        A: { shape: [2, 2], data: Float64Array.from([Math.PI, 1e300, -1e-300, 2 ** -1074]) },
        B: { shape: [2, 2], data: Float64Array.from([1 / 3, 1e10, 7, -0.5]) },
      }],
      ['grouped_matmul', {
        input: { shape: [6, 16], data: randomFloats(96, 14) },
        weights: { shape: [4, 16, 8], data: randomFloats(512, 15) },
        group_indices: { shape: [6, 2],
                         data: Int32Array.from([0, 1, 1, 2, 2, 3, 3, 0, 0, 2, 1, 3]) },
        bias: { shape: [4, 8], data: randomFloats(32, 16) },
      }],
    ];
    for (const [model, inputs] of cases) {
      const viaGrpc = await grpc.infer(model, inputs);
      const what = `${model} ${Object.values(inputs)[0].data.constructor.name}`;
      assertSameOutputs(await http.infer(model, inputs), viaGrpc, `${what}: HTTP binary`);
      assertSameOutputs(await http.infer(model, inputs, { binary: false }), viaGrpc,
                        `${what}: HTTP JSON`);
    }
  });
});

describe('errors', () => {
  test('a shape mismatch is an HttpError 400 with the server message, as over gRPC',
       async () => {
    const inputs = {
      A: { shape: [2, 3], data: new Float32Array(6) },
      B: { shape: [4, 2], data: new Float32Array(8) }, // inner dimensions 3 and 4
    };
    const grpcError = await grpc.infer('matmul', inputs).then(() => null, (e) => e);
    assert.ok(grpcError, 'gRPC rejects it');
    for (const binary of [true, false]) {
      await assert.rejects(http.infer('matmul', inputs, { binary }), (error) => {
        assert.ok(error instanceof HttpError, error);
        assert.equal(error.name, 'HttpError');
        assert.equal(error.status, 400);
        assert.equal(error.message, grpcError.details);
        return true;
      });
    }
  });

  test('an unknown model is an HttpError 404', async () => {
    const one = { shape: [1, 1], data: new Float32Array(1) };
    await assert.rejects(http.infer('no_such_model', { A: one, B: one }), (error) => {
      assert.ok(error instanceof HttpError);
      assert.equal(error.status, 404);
      assert.match(error.message, /no_such_model/);
      return true;
    });
    await assert.rejects(http.modelMetadata('no_such_model'), { name: 'HttpError', status: 404 });
  });

  test('an integer out of its type in JSON is refused, not clipped', async () => {
    const response = await http.request('POST', '/v2/models/matmul/infer', {
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ inputs: [
        { name: 'A', shape: [1, 1], datatype: 'INT32', data: [2147483648] },
        { name: 'B', shape: [1, 1], datatype: 'INT32', data: [1] },
      ] }),
    });
    assert.equal(response.status, 400);
    assert.ok((await response.json()).error.length > 0);
  });

  test('malformed inputs reject before anything is sent', async () => {
    await assert.rejects(http.infer('matmul', { A: { shape: [2, 3], data: new Float32Array(5) } }),
                         /shape \[2,3\] holds 6 elements, data has 5/);
    await assert.rejects(http.infer('matmul', { A: { datatype: 'BF16', shape: [1], data: [1.5] } },
                                    { binary: false }),
                         /Uint16Array of bit patterns/);
    await assert.rejects(http.infer('matmul', { A: { shape: [1], data: new Uint16Array(1) } }),
                         /name its datatype/);
    assert.throws(() => new HttpClient('127.0.0.1:8000'), TypeError);
  });

});

// A stand-in HTTP server on loopback, answering each request with `handler`.
async function standIn(handler) {
  const server = httpServer.createServer(handler);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${server.address().port}` };
}

describe('against a stand-in server', () => {
  test('a timeout rejects with TimeoutError and closes the connection', async () => {
    let closed;
    const hungUp = new Promise((resolve) => { closed = resolve; });
    // Never answers; resolves once the client has closed its connection.
    const { server, url } = await standIn((request) => request.socket.on('close', closed));
    try {
      const client = new HttpClient(url, { timeoutMs: 50 });
      await assert.rejects(client.infer('matmul', { A: { shape: [1], data: new Float32Array(1) } }),
                           { name: 'TimeoutError' });
      await hungUp; // the server sees the hang-up, which drops a queued request
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  test('an error that is not the server JSON keeps its text; bad bodies are refused',
       async () => {
    const answers = {
      '/v2': [502, 'text/html', 'bad gateway'],
      '/v2/health/ready': [503, 'application/json', '{"error":"too many connections"}'],
      '/v2/models/m/infer': [200, 'application/json',
                             '{"outputs":[{"name":"Y","datatype":"FP32","shape":[2],"data":[1]}]}'],
    };
    const { server, url } = await standIn((request, response) => {
      const [status, type, body] = answers[request.url];
      request.resume();
      request.on('end', () => response.writeHead(status, { 'Content-Type': type }).end(body));
    });
    try {
      const client = new HttpClient(`${url}/`);
      await assert.rejects(client.serverMetadata(), { name: 'HttpError', status: 502,
                                                      message: 'bad gateway' });
      await assert.rejects(client.serverReady(), { name: 'HttpError', status: 503,
                                                   message: 'too many connections' });
      await assert.rejects(client.infer('m', { A: { shape: [1], data: new Float32Array(1) } }),
                           /output 'Y' of shape \[2\] and datatype FP32 with 4 bytes, expected 8/);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  test('headers: token, defaults and the caller\'s merged without regard to case', async () => {
    const seen = [];
    const { server, url } = await standIn((request, response) => {
      const chunks = [];
      request.on('data', (chunk) => chunks.push(chunk));
      request.on('end', () => {
        seen.push({ url: request.url, headers: request.headers, body: Buffer.concat(chunks) });
        const header = '{"outputs":[{"name":"Y","datatype":"INT32","shape":[1],' +
                       '"parameters":{"binary_data_size":4}}]}';
        response.writeHead(200, { 'Inference-Header-Content-Length': String(header.length) });
        response.end(Buffer.concat([Buffer.from(header), Buffer.from(Int32Array.of(7).buffer)]));
      });
    });
    try {
      const client = new HttpClient(`${url}/prefix`, {
        token: 't0k', headers: { 'accept-encoding': 'gzip', 'X-Trace': 'a' },
      });
      const { Y } = await client.infer('m/x', { A: { shape: [1], data: Int32Array.of(5) } },
                                       { version: '2' });
      assert.deepEqual(Array.from(Y.data), [7]);
      const [{ url: path, headers, body }] = seen;
      assert.equal(path, '/prefix/v2/models/m%2Fx/versions/2/infer');
      assert.equal(headers.authorization, 'Bearer t0k');
      assert.equal(headers['accept-encoding'], 'gzip');
      assert.equal(headers['x-trace'], 'a');
      assert.equal(headers['content-type'], 'application/octet-stream');
      const length = Number(headers['inference-header-content-length']);
      assert.deepEqual(JSON.parse(body.subarray(0, length)).inputs,
                       [{ name: 'A', shape: [1], datatype: 'INT32',
                          parameters: { binary_data_size: 4 } }]);
      assert.ok(body.subarray(length).equals(Buffer.from(Int32Array.of(5).buffer)));
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  test('a server that is not there rejects with fetch\'s TypeError', async () => {
    const { server, url } = await standIn(() => {});
    await new Promise((resolve) => server.close(resolve)); // the port is free again
    await assert.rejects(new HttpClient(url).serverLive(), TypeError); // "fetch failed"
  });
});

describe('bearer tokens', () => {
  let secured;
  let dir;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gemmserve-http-test-'));
    const tokens = path.join(dir, 'tokens');
    fs.writeFileSync(tokens, 'sesame\n');
    secured = await new ServerProcess([`--auth_token_file=${tokens}`]).start();
  });

  after(async () => {
    if (secured) assert.equal(await secured.stop(), 0, secured.stderr);
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('Authorization: Bearer <token> is sent; health needs none', async () => {
    const inputs = { A: { shape: [1, 1], data: Float32Array.from([3]) },
                     B: { shape: [1, 1], data: Float32Array.from([4]) } };
    const anonymous = new HttpClient(secured.httpUrl);
    assert.equal(await anonymous.serverReady(), true);
    await assert.rejects(anonymous.infer('matmul', inputs), { name: 'HttpError', status: 401 });
    const wrong = new HttpClient(secured.httpUrl, { token: 'open' });
    await assert.rejects(wrong.modelMetadata('matmul'),
                         { name: 'HttpError', status: 401, message: /invalid bearer token/ });
    const client = new HttpClient(secured.httpUrl, { token: 'sesame' });
    assert.deepEqual(Array.from((await client.infer('matmul', inputs)).Y.data), [12]);
    assert.equal(await client.modelReady('matmul'), true);
    // headers: the token can also be given as a header of every request.
    const byHeader = new HttpClient(secured.httpUrl, {
      headers: { Authorization: 'Bearer sesame' },
    });
    assert.deepEqual(Array.from((await byHeader.infer('matmul', inputs)).Y.data), [12]);
  });
});

describe('wire format', () => {
  test('a binary request: JSON header, then the tensors in input order', () => {
    const a = Float32Array.from([1, 2]);
    const b = BigInt64Array.from([3n]);
    const { body, headerLength } = encodeInferRequest({
      A: { shape: [2], data: a }, B: { shape: [1], data: b },
    }, { id: 'x', parameters: { priority: 1 } });
    const header = JSON.parse(body.subarray(0, headerLength).toString());
    assert.deepEqual(header, {
      id: 'x',
      parameters: { priority: 1, binary_data_output: true },
      inputs: [
        { name: 'A', shape: [2], datatype: 'FP32', parameters: { binary_data_size: 8 } },
        { name: 'B', shape: [1], datatype: 'INT64', parameters: { binary_data_size: 8 } },
      ],
    });
    assert.ok(body.subarray(headerLength).equals(Buffer.concat([Buffer.from(a.buffer),
                                                                 Buffer.from(b.buffer)])));
    const named = encodeInferRequest({ A: { shape: [2], data: a } }, { outputs: ['Y'] });
    assert.deepEqual(JSON.parse(named.body.subarray(0, named.headerLength)).outputs,
                     [{ name: 'Y', parameters: { binary_data: true } }]);
  });

  test('JSON numbers are exact: BigInts whole, floats shortest, -0 and NaN kept', () => {
    const { body, headerLength } = encodeInferRequest({
      I: { shape: [2], data: BigInt64Array.from([-(2n ** 63n), 2n ** 53n + 1n]) },
      F: { shape: [4], data: Float32Array.from([0.1, -0, NaN, -Infinity]) },
    }, { binary: false });
    assert.equal(headerLength, null);
    const text = body.toString();
    assert.match(text, /"data":\[-9223372036854775808,9007199254740993\]/);
    assert.match(text, /"data":\[0\.1,-0,NaN,-Infinity\]/);
  });

  test('responses: NaN and integers beyond 2^53 parse exactly; sizes are checked', () => {
    assert.deepEqual(parseExactJson('[NaN,-Infinity,18446744073709551615,-0.5e1, -0 ]'),
                     [NaN, -Infinity, 18446744073709551615n, -5, -0]); // deepEqual: -0 is not 0
    assert.deepEqual(parseExactJson('{"__proto__":{"a":[]},"b":"\\u00e9"}'),
                     JSON.parse('{"__proto__":{"a":[]},"b":"\\u00e9"}'));
    assert.throws(() => parseExactJson('[1,]'), SyntaxError);
    assert.throws(() => parseExactJson('{"a":1} x'), SyntaxError);
    const header = '{"outputs":[{"name":"Y","datatype":"FP32","shape":[2],' +
                   '"parameters":{"binary_data_size":8}}]}';
    const floats = Buffer.from(Float32Array.from([1, 2]).buffer);
    const body = Buffer.concat([Buffer.from(header), floats]);
    assert.deepEqual(Array.from(decodeInferResponse(body, String(header.length)).Y.data), [1, 2]);
    assert.throws(() => decodeInferResponse(body.subarray(0, body.length - 1),
                                            String(header.length)), /past the body's end/);
    assert.throws(() => decodeInferResponse(Buffer.from(
      '{"outputs":[{"name":"Y","datatype":"INT64","shape":[1],"data":[9223372036854775808]}]}')),
    /out of range/);
    assert.throws(() => decodeInferResponse(Buffer.from(
      '{"outputs":[{"name":"Y","datatype":"FP32","shape":[3],"data":[1,2]}]}')),
    /with 8 bytes, expected 12/);
  });

  test('FP16 bits <-> numbers: exact one way, nearest even the other', () => {
    for (let bits = 0; bits < 0x10000; ++bits) {
      const value = halfBitsToNumber(bits);
      if (Number.isNaN(value)) continue;
      assert.equal(numberToHalfBits(value), bits, `bits 0x${bits.toString(16)}`);
    }
    assert.equal(numberToHalfBits(1 + 2 ** -11), 0x3c00); // a tie: to the even 1.0
    assert.equal(numberToHalfBits(1 + 3 * 2 ** -11), 0x3c02);
    assert.equal(numberToHalfBits(65520), 0x7c00); // past the largest half: infinity
    assert.equal(numberToHalfBits(NaN) & 0x7e00, 0x7e00);
  });
});

test('examples/http_matmul.js matches its reference', async () => {
  const example = path.join(__dirname, '..', 'examples', 'http_matmul.js');
  const { stdout } = await new Promise((resolve, reject) => {
    execFile(process.execPath, [example, server.httpUrl], { timeout: 30000 },
             (error, out, err) => (error ? reject(new Error(`${error.message}\n${out}${err}`))
                                         : resolve({ stdout: out })));
  });
  assert.match(stdout, /matmul FP32 binary .* -> \[4, 8\]: OK/);
  assert.match(stdout, /matmul FP32 json .* -> \[4, 8\]: OK/);
  assert.match(stdout, /binary and json outputs identical/);
});
