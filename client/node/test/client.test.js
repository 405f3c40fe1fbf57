'use strict';
// gemmserve-client against a live gemmserve: MatMul (FP32, INT32 with
// wrap-around, BF16), GroupedMatMul, errors as rejected promises carrying the
// gRPC code, checks made before sending, examples/grouped_matmul.js, and a
// small mixture-of-experts layer model (ModelConfig's parameters and
// examples/moe_layer.js); and ModelStreamInfer streams: answers matched by id
// across models, an error mid-stream, cancel, tokens (once per stream) and the
// server shutting down.
//
// Run by ctest through test/run_test.sh (which installs the npm packages and
// sets NODE_PATH); by hand, after `npm ci` in client/node:
//   GEMMSERVE_BIN=build/bin/gemmserve node --test client/node/test/client.test.js

const assert = require('node:assert/strict');
const { execFile, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { after, before, describe, test } = require('node:test');

const { GemmServeClient, bf16BitsToFloat32, float32ToBf16Bits, status } = require('..');
const { groupedMatmul, matmul } = require('./reference');
const { ServerProcess } = require('./server');

let server;
let client;
let repository;

// Small mixture-of-experts layers (K 64, I 32, 8 experts, 2 per token):
// `moe_layer` routed in the graph, `moe_layer_given` routed by the caller, in BF16.
const LAYERS = {
  moe_layer: ['--routing', 'softmax_topk'],
  moe_layer_given: ['--routing', 'given', '--dtype', 'bf16'],
};

// A model repository holding LAYERS, written by scripts/make_moe_layer.py.
function writeLayerRepository() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gemmserve-node-layer-test-'));
  const script = path.join(__dirname, '..', '..', '..', 'scripts', 'make_moe_layer.py');
  for (const [name, flags] of Object.entries(LAYERS)) {
    const made = spawnSync('/usr/bin/python3', [
      '-B', script, '--out', path.join(dir, name, '1', 'model.onnx'),
      '--k', '64', '--i', '32', '--g', '8', '--s', '2', ...flags], { encoding: 'utf8' });
    assert.equal(made.status, 0, `make_moe_layer.py failed:\n${made.stdout}${made.stderr}`);
  }
  return dir;
}

before(async () => {
  repository = writeLayerRepository();
  server = await new ServerProcess([`--model_repository=${repository}`]).start();
  client = new GemmServeClient(server.address);
  await client.waitForReady(10000);
});

after(async () => {
  if (client) client.close();
  if (server) {
    assert.equal(await server.stop(), 0, `gemmserve did not exit cleanly:\n${server.stderr}`);
  }
  if (repository) fs.rmSync(repository, { recursive: true, force: true });
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

// Runs examples/<name> with `args`; resolves to its stdout, rejects unless it exits 0.
function runExample(name, args) {
  const example = path.join(__dirname, '..', 'examples', name);
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [example, ...args], { timeout: 30000 },
             (error, out, err) => (error ? reject(new Error(`${error.message}\n${out}${err}`))
                                         : resolve(out)));
  });
}

test('examples/grouped_matmul.js matches its reference', async () => {
  const stdout = await runExample('grouped_matmul.js', [server.address]);
  assert.match(stdout, /grouped_matmul FP32 .* -> \[6, 2, 8\]: OK/);
});

test('modelConfig reports a layer model\'s parameters', async () => {
  const config = await client.modelConfig('moe_layer');
  assert.equal(config.name, 'moe_layer');
  const parameters = Object.fromEntries(Object.entries(config.parameters)
    .map(([key, value]) => [key, value.string_value]));
  assert.deepEqual({ layer: parameters.layer, routing: parameters.routing, k: parameters.k,
                     groups: parameters.groups, s: parameters.s },
                   { layer: 'moe_ffn', routing: 'softmax_topk', k: '64', groups: '8', s: '2' });
  assert.deepEqual(config.input.map((t) => [t.name, t.data_type, t.dims]),
                   [['x', 'TYPE_FP32', ['-1', '64']]]);
});

// The example's lines, without the numbers in parentheses.
async function moeLayerExampleLines(...args) {
  const stdout = await runExample('moe_layer.js', [server.address, ...args]);
  return stdout.trim().split('\n').map((line) => line.replace(/ \(.*\)/, ''));
}

test('examples/moe_layer.js checks layer models', async () => {
  assert.deepEqual(await moeLayerExampleLines(), [ // the default model: moe_layer
    'moe_layer: layer moe_ffn, routing softmax_topk, activation silu, groups 8, ' +
      'x FP32 [-1, 64]: OK',
    'moe_layer x [4, 64] -> out FP32 [4, 64], finite: OK',
    'moe_layer tokens 0-1 alone = rows 0-1 of the 4-token answer: OK',
  ]);
  // ids and w sent too, values as BF16 bit patterns.
  assert.deepEqual(await moeLayerExampleLines('moe_layer_given'), [
    'moe_layer_given: layer moe_ffn, routing given, activation silu, groups 8, ' +
      'x BF16 [-1, 64]: OK',
    'moe_layer_given x [4, 64] -> out BF16 [4, 64], finite: OK',
    'moe_layer_given tokens 0-1 alone = rows 0-1 of the 4-token answer: OK',
  ]);
  // Not a layer: the first check fails, and so does the example.
  await assert.rejects(runExample('moe_layer.js', [server.address, 'matmul']),
                       /matmul: layer \(none\), routing \(none\), .*: MISMATCH/);
});

// Streams. Small integers: every float sum is exact, whatever the order of summation.
const STREAM_TEST = { timeout: 10000 };

function smallInts(count, seed) {
  return Float32Array.from({ length: count }, (_, i) => ((i * 7 + seed * 13) % 9) - 4);
}

// The i-th request of the interleaved streams: matmul for odd i, grouped_matmul
// for even i, with its expected answer.
function streamCall(i) {
  if (i % 2) {
    const [M, K, N] = [1 + (i % 4), 5, 2 + (i % 3)];
    const a = smallInts(M * K, i);
    const b = smallInts(K * N, i + 1);
    return { model: 'matmul', id: `mm-${i}`, output: 'Y', shape: [M, N],
             inputs: { A: { shape: [M, K], data: a }, B: { shape: [K, N], data: b } },
             want: matmul(a, b, M, K, N) };
  }
  const [M, K, N, G, S] = [3, 4, 2, 3, 2];
  const x = smallInts(M * K, i);
  const w = smallInts(G * K * N, i + 2);
  const idx = BigInt64Array.from({ length: M * S }, (_, j) => BigInt((i + j) % G));
  return { model: 'grouped_matmul', id: `g-${i}`, output: 'output', shape: [M, S, N],
           inputs: { input: { shape: [M, K], data: x }, weights: { shape: [G, K, N], data: w },
                     group_indices: { shape: [M, S], data: idx } },
           want: groupedMatmul(x, w, idx, null, M, K, N, S) };
}

const BAD_MATMUL = { A: { shape: [2, 3], data: new Float32Array(6) },
                     B: { shape: [4, 5], data: new Float32Array(20) } }; // K 3 and 4

function checkAnswer(call, answer) {
  assert.equal(answer.model, call.model, answer.id);
  assert.equal(answer.error, null, `${answer.id}: ${answer.error}`);
  const tensor = answer.outputs[call.output];
  assert.deepEqual(tensor.shape, call.shape, answer.id);
  assert.ok(tensor.data instanceof Float32Array);
  assert.deepEqual(Array.from(tensor.data), call.want, answer.id);
}

test('stream: matmul and grouped_matmul interleaved, answered by id, an error mid-stream',
     STREAM_TEST, async () => {
  const calls = Array.from({ length: 12 }, (_, i) => streamCall(i));
  const stream = client.stream({ timeoutMs: 10000 });
  calls.forEach((call, i) => {
    if (i === 5) assert.equal(stream.send('matmul', BAD_MATMUL, { id: 'bad' }), 'bad');
    assert.equal(stream.send(call.model, call.inputs, { id: call.id }), call.id);
  });
  stream.end();
  const answers = new Map();
  for await (const answer of stream) {
    assert.ok(!answers.has(answer.id), `${answer.id} answered twice`);
    answers.set(answer.id, answer);
  }
  assert.deepEqual([...answers.keys()].sort(), [...calls.map((c) => c.id), 'bad'].sort());
  const bad = answers.get('bad');
  assert.equal(bad.model, 'matmul');
  assert.equal(bad.outputs, null);
  assert.match(bad.error, /\b3\b.*\b4\b/); // both contracted dimensions
  for (const call of calls) checkAnswer(call, answers.get(call.id));
});

test('stream: ids default to the count of requests sent; send() checks inputs first',
     STREAM_TEST, async () => {
  const stream = client.stream();
  const one = { shape: [1, 1], data: Float32Array.from([3]) };
  assert.equal(stream.send('matmul', { A: one, B: one }), '0');
  assert.throws(() => stream.send('matmul', { A: { shape: [2], data: new Float32Array(3) } }),
                { name: 'RangeError', message: /holds 2 elements, data has 3/ });
  assert.equal(stream.send('no_such_model', { A: one }), '1');
  assert.equal(stream.send('matmul', { A: one, B: one }, { id: 7, outputs: ['Y'] }), '7');
  stream.end();
  assert.throws(() => stream.send('matmul', { A: one, B: one }), /after its end\(\) or cancel\(\)/);
  const answers = {};
  for await (const answer of stream) answers[answer.id] = answer;
  assert.deepEqual(Object.keys(answers).sort(), ['0', '1', '7']);
  assert.deepEqual(Array.from(answers['0'].outputs.Y.data), [9]);
  assert.deepEqual(Array.from(answers['7'].outputs.Y.data), [9]);
  assert.deepEqual(answers['1'], { id: '1', model: 'no_such_model', outputs: null,
                                   error: answers['1'].error });
  assert.match(answers['1'].error, /no_such_model/);
  await assert.rejects(async () => { for await (const _ of stream); },
                       /iterated only once/);
});

test('streamInfer resolves to the answers in the order of the calls', STREAM_TEST, async () => {
  const calls = Array.from({ length: 6 }, (_, i) => streamCall(i));
  const answers = await client.streamInfer([
    ...calls.map(({ model, inputs, id }) => ({ model, inputs, id })),
    { model: 'matmul', inputs: BAD_MATMUL }, // id: its index
  ], { timeoutMs: 10000 });
  assert.equal(answers.length, 7);
  calls.forEach((call, i) => {
    assert.equal(answers[i].id, call.id);
    checkAnswer(call, answers[i]);
  });
  assert.equal(answers[6].id, '6');
  assert.equal(answers[6].outputs, null);
  assert.match(answers[6].error, /contracted dimensions/);
  assert.deepEqual(await client.streamInfer([]), []);
  // Malformed calls reject before anything is sent.
  const one = { shape: [1], data: new Float32Array(1) };
  await assert.rejects(client.streamInfer([{ model: 'matmul', inputs: { A: one }, id: 'a' },
                                           { model: 'matmul', inputs: { A: one }, id: 'a' }]),
                       { name: 'TypeError', message: /id 'a' is used twice/ });
  await assert.rejects(client.streamInfer([{ model: 'matmul', inputs: { A: { shape: [2] } } }]),
                       TypeError);
  await assert.rejects(client.streamInfer({ model: 'matmul' }), TypeError);
});

test('stream: cancel() ends the iteration, with or without answers', STREAM_TEST, async () => {
  const one = { shape: [1, 1], data: Float32Array.from([2]) };
  // Cancelled after the first answer: the loop ends, no error.
  const stream = client.stream();
  for (let i = 0; i < 4; ++i) stream.send('matmul', { A: one, B: one });
  const seen = [];
  for await (const answer of stream) {
    seen.push(answer);
    if (seen.length === 1) stream.cancel();
  }
  assert.ok(seen.length >= 1 && seen.length <= 4, `${seen.length} answers`);
  assert.deepEqual(Array.from(seen[0].outputs.Y.data), [4]);
  assert.throws(() => stream.send('matmul', { A: one, B: one }), /after its end\(\) or cancel\(\)/);
  // Cancelled before anything was answered, the stream still open.
  const idle = client.stream();
  idle.send('matmul', { A: one, B: one });
  idle.cancel();
  for await (const answer of idle) assert.ok(answer.id === '0');
  // Leaving the loop early cancels the stream.
  const left = client.stream();
  left.send('matmul', { A: one, B: one });
  left.send('matmul', { A: one, B: one });
  for await (const answer of left) {
    assert.equal(answer.error, null);
    break;
  }
  assert.throws(() => left.send('matmul', { A: one, B: one }), /after its end\(\) or cancel\(\)/);
  // The channel is fine afterwards.
  assert.deepEqual(Array.from((await client.infer('matmul', { A: one, B: one })).Y.data), [4]);
});

describe('streams on a server with tokens', () => {
  let secured;
  let securedClient;
  let dir;
  const one = { shape: [1, 1], data: Float32Array.from([3]) };

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gemmserve-node-stream-test-'));
    const tokens = path.join(dir, 'tokens');
    fs.writeFileSync(tokens, 'sesame\n');
    secured = await new ServerProcess([`--auth_token_file=${tokens}`, '--http_port=-1']).start();
    securedClient = new GemmServeClient(secured.address);
    await securedClient.waitForReady(10000);
  });

  after(async () => {
    if (securedClient) securedClient.close();
    if (secured) assert.equal(await secured.stop(), 0, secured.stderr);
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the token is sent once, in the stream\'s metadata', STREAM_TEST, async () => {
    const anonymous = securedClient.stream();
    anonymous.send('matmul', { A: one, B: one });
    await assert.rejects(async () => { for await (const _ of anonymous); },
                         { code: status.UNAUTHENTICATED });
    // A failure that arrived before the iteration began is still reported.
    const wrong = securedClient.stream({ metadata: { authorization: 'Bearer open' } });
    wrong.send('matmul', { A: one, B: one });
    // (The underlying grpc-js call says when the server's refusal has come.)
    await new Promise((resolve) => { wrong._call.on('status', resolve); });
    await assert.rejects(async () => { for await (const _ of wrong); },
                         { code: status.UNAUTHENTICATED, details: /invalid bearer token/ });
    const calls = [{ model: 'matmul', inputs: { A: one, B: one } },
                   { model: 'matmul', inputs: { A: one, B: one } }];
    await assert.rejects(securedClient.streamInfer(calls), { code: status.UNAUTHENTICATED });
    const answers = await securedClient.streamInfer(
      calls, { metadata: { authorization: 'Bearer sesame' } });
    assert.deepEqual(answers.map((a) => Array.from(a.outputs.Y.data)), [[9], [9]]);
  });

  // Last: it stops the server.
  test('the server shutting down ends the stream with UNAVAILABLE', STREAM_TEST, async () => {
    const stream = securedClient.stream({ metadata: { authorization: 'Bearer sesame' } });
    stream.send('matmul', { A: one, B: one }, { id: 'before' });
    const answers = stream[Symbol.asyncIterator]();
    const first = await answers.next();
    assert.equal(first.value.id, 'before');
    assert.deepEqual(Array.from(first.value.outputs.Y.data), [9]);
    const stopped = secured.stop(); // SIGTERM, the stream still open
    await assert.rejects(answers.next(), { code: status.UNAVAILABLE });
    assert.equal(await stopped, 0, secured.stderr);
  });
});
