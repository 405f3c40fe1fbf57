'use strict';
// gemmserve-client against a live gemmserve: MatMul (FP32, INT32 with
// wrap-around, BF16), GroupedMatMul, errors as rejected promises carrying the
// gRPC code, checks made before sending, and examples/grouped_matmul.js.
//
// Run by ctest through test/run_test.sh (which installs the npm packages and
// sets NODE_PATH); by hand, after `npm ci` in client/node:
//   GEMMSERVE_BIN=build/bin/gemmserve node --test client/node/test/client.test.js

const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const path = require('node:path');
const { after, before, test } = require('node:test');

const { GemmServeClient, bf16BitsToFloat32, float32ToBf16Bits, status } = require('..');
const { groupedMatmul, matmul } = require('./reference');
const { ServerProcess } = require('./server');

let server;
let client;

before(async () => {
  server = await new ServerProcess().start();
  client = new GemmServeClient(server.address);
  await client.waitForReady(10000);
});

after(async () => {
  if (client) client.close();
  if (server) {
    assert.equal(await server.stop(), 0, `gemmserve did not exit cleanly:\n${server.stderr}`);
  }
});

test('matmul FP32', async () => {
  const a = Float32Array.from({ length: 2 * 3 }, (_, i) => i * 0.5 - 1);
  const b = Float32Array.from({ length: 3 * 4 }, (_, i) => (i % 5) * 0.25);
  const { Y } = await client.infer('matmul', {
    A: { datatype: 'FP32', shape: [2, 3], data: a },
    B: { shape: [3, 4], data: b }, // datatype from the Float32Array
  });
  assert.equal(Y.datatype, 'FP32');
  assert.deepEqual(Y.shape, [2, 4]);
  assert.ok(Y.data instanceof Float32Array);
  matmul(a, b, 2, 3, 4).forEach((want, i) => assert.ok(Math.abs(Y.data[i] - want) <= 1e-6,
                                                       `Y[${i}] = ${Y.data[i]}, want ${want}`));
});

test('matmul INT32 is exact and wraps around like int32', async () => {
  const a = Int32Array.from([2147483647, 3, -7, 65536, 1, -2147483648]);
  const b = Int32Array.from([2, -1, 65536, 5, 9, 1]);
  const { Y } = await client.infer('matmul', {
    A: { datatype: 'INT32', shape: [2, 3], data: a },
    B: { datatype: 'INT32', shape: [3, 2], data: b },
  });
  assert.equal(Y.datatype, 'INT32');
  assert.deepEqual(Y.shape, [2, 2]);
  const want = matmul(a, b, 2, 3, 2, { add: (x, y) => (x + y) | 0, mul: Math.imul });
  assert.deepEqual(Array.from(Y.data), want);
});

test('matmul BF16 travels as Uint16Array bit patterns', async () => {
  const a = Float32Array.from([1, 2, 3, 4, 5, 6]);
  const b = Float32Array.from([0.5, -1, 2, 0.25, 1, 1]);
  const { Y } = await client.infer('matmul', {
    A: { datatype: 'BF16', shape: [2, 3], data: float32ToBf16Bits(a) },
    B: { datatype: 'BF16', shape: [3, 2], data: float32ToBf16Bits(b) },
  });
  assert.equal(Y.datatype, 'BF16');
  assert.ok(Y.data instanceof Uint16Array);
  // Small integers and halves: exact in bfloat16.
  assert.deepEqual(Array.from(bf16BitsToFloat32(Y.data)), matmul(a, b, 2, 3, 2));
});

test('grouped_matmul with INT64 indices and bias', async () => {
  const [M, K, N, G, S] = [3, 2, 2, 3, 2];
  const x = Float32Array.from([1, 2, 3, 4, 5, 6]);
  const w = Float32Array.from({ length: G * K * N }, (_, i) => i);
  const bias = Float32Array.from({ length: G * N }, (_, i) => 100 * i);
  const idx = BigInt64Array.from([2n, 0n, 1n, 1n, 0n, 2n]);
  const { output } = await client.infer('grouped_matmul', {
    input: { shape: [M, K], data: x },
    weights: { shape: [G, K, N], data: w },
    group_indices: { shape: [M, S], data: idx },
    bias: { shape: [G, N], data: bias },
  }, { timeoutMs: 10000, outputs: ['output'] });
  assert.deepEqual(output.shape, [M, S, N]);
  const want = groupedMatmul(x, w, idx, bias, M, K, N, S);
  assert.deepEqual(Array.from(output.data), want);
});

test('a server rejection rejects the promise with the gRPC code', async () => {
  await assert.rejects(client.infer('matmul', {
    A: { shape: [2, 3], data: new Float32Array(6) },
    B: { shape: [4, 2], data: new Float32Array(8) }, // inner dimensions 3 and 4
  }), (error) => {
    assert.equal(error.code, status.INVALID_ARGUMENT);
    assert.ok(error.details.length > 0, 'the server says why');
    return true;
  });
  const one = { shape: [1], data: new Float32Array(1) };
  await assert.rejects(client.infer('no_such_model', { A: one }), { code: status.NOT_FOUND });
});

test('malformed inputs reject before anything is sent', async () => {
  await assert.rejects(client.infer('matmul', { A: { shape: [2, 3], data: new Float32Array(5) } }),
                       /shape \[2,3\] holds 6 elements, data has 5/);
  await assert.rejects(client.infer('matmul', { A: { datatype: 'BF16', shape: [1], data: [1.5] } }),
                       /Uint16Array of bit patterns/);
  await assert.rejects(client.infer('matmul', { A: { shape: [1], data: new Uint16Array(1) } }),
                       /name its datatype/);
  const doubles = { datatype: 'FP32', shape: [1], data: new Float64Array(1) };
  await assert.rejects(client.infer('matmul', { A: doubles }),
                       /FP32 data must be a Float32Array or an Array/);
});

test('server health calls', async () => {
  assert.equal(await client.serverLive(), true);
  assert.equal(await client.serverReady(), true);
  assert.equal(await client.modelReady('grouped_matmul'), true);
  const metadata = await client.modelMetadata('matmul');
  assert.deepEqual(metadata.inputs.map((t) => t.name), ['A', 'B']);
});

test('examples/grouped_matmul.js matches its reference', async () => {
  const example = path.join(__dirname, '..', 'examples', 'grouped_matmul.js');
  const { stdout } = await new Promise((resolve, reject) => {
    execFile(process.execPath, [example, server.address], { timeout: 30000 },
             (error, out, err) => (error ? reject(new Error(`${error.message}\n${out}${err}`))
                                         : resolve({ stdout: out })));
  });
  assert.match(stdout, /grouped_matmul FP32 .* -> \[6, 2, 8\]: OK/);
});
