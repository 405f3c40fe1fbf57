#!/usr/bin/env node
'use strict';
// Calls a mixture-of-experts layer model (docs/moe_layer.md) on a gemmserve
// server and checks what a layer promises, whatever its weights:
//
//   node examples/moe_layer.js [URL] [MODEL]   # default 127.0.0.1:8001 moe_layer
//
// It reads the model's metadata (K and the datatype T from x's shape [-1, K])
// and its config's parameters (layer, routing, activation, groups), sends
// 4 tokens x [4, K] of seeded random values in T (with ids [4, S] in
// [0, groups) and weights w [4, S] when the routing is "given"), and checks
// that out is [4, K] of T and finite; then sends tokens 0-1 alone and checks
// they get rows 0-1 of the 4-token answer, within 1e-4 of its largest
// magnitude: tokens are independent in a layer. Every check prints a line
// ending in ": OK" or ": MISMATCH"; exits 0 when all are OK, 1 otherwise.

const { GemmServeClient, bf16BitsToFloat32, float32ToBf16Bits } = require('..');
const { halfBitsToNumber, numberToHalfBits } = require('../lib/http');

const TOKENS = 4;
const ALONE = 2; // tokens 0..ALONE-1 sent again on their own
const TOLERANCE = 1e-4;
const FLOAT_TYPES = ['FP32', 'FP16', 'BF16'];

// A small deterministic generator (mulberry32), values in [-1, 1).
function randomValues(count, seed) {
  let state = seed >>> 0;
  const values = new Float32Array(count);
  for (let i = 0; i < count; ++i) {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    values[i] = (((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * 2 - 1;
  }
  return values;
}

// float32 values -> the data of a tensor of `datatype` (FP16/BF16 as bit patterns).
function encodeFloats(values, datatype) {
  if (datatype === 'BF16') return float32ToBf16Bits(values);
  if (datatype === 'FP16') return Uint16Array.from(values, numberToHalfBits);
  return values;
}

// An FP32, FP16 or BF16 tensor's data -> its values.
function decodeFloats({ datatype, data }) {
  if (datatype === 'BF16') return bf16BitsToFloat32(data);
  if (datatype === 'FP16') return Float32Array.from(data, halfBitsToNumber);
  return data;
}

function report(label, ok) {
  console.log(`${label}: ${ok ? 'OK' : 'MISMATCH'}`);
  return ok;
}

// The layer's tensors and parameters, from its metadata and config: x (the
// first input), and with given routing ids (the integer input) and w.
async function describeLayer(client, model) {
  const metadata = await client.modelMetadata(model, { timeoutMs: 30000 });
  const config = await client.modelConfig(model, { timeoutMs: 30000 });
  const parameter = (key) => (config.parameters[key] || {}).string_value || '';
  const [x, ...rest] = metadata.inputs;
  const ids = rest.find((t) => t.datatype === 'INT32' || t.datatype === 'INT64');
  return {
    layer: parameter('layer'),
    routing: parameter('routing'),
    activation: parameter('activation'),
    groups: Number(parameter('groups')),
    x,
    K: Number(x.shape[x.shape.length - 1]),
    ids,
    w: rest.find((t) => t !== ids),
    S: ids ? Number(ids.shape[ids.shape.length - 1]) : 0,
    out: metadata.outputs[0],
  };
}

// The metadata and config say a layer of a datatype this example sends.
function checkLayer(model, layer) {
  const given = layer.routing === 'given';
  const ok = layer.layer === 'moe_ffn' && FLOAT_TYPES.includes(layer.x.datatype) &&
             layer.K > 0 && given === Boolean(layer.ids && layer.w) &&
             (!given || (layer.S > 0 && layer.groups >= layer.S));
  const said = ['layer', 'routing', 'activation', 'groups']
    .map((key) => `${key} ${layer[key] || '(none)'}`).join(', ');
  return report(`${model}: ${said}, ${layer.x.name} ${layer.x.datatype} ` +
                `[${layer.x.shape.join(', ')}]`, ok);
}

// The request for `TOKENS` tokens: x, and with given routing token m's ids
// (3m + s) % groups (S different experts) and random weights in [0, 1).
function layerInputs(layer) {
  const { x, K, ids, w, S, groups } = layer;
  const inputs = {
    [x.name]: { datatype: x.datatype, shape: [TOKENS, K],
                data: encodeFloats(randomValues(TOKENS * K, 1), x.datatype) },
  };
  if (ids) {
    const Type = ids.datatype === 'INT64' ? BigInt64Array : Int32Array;
    const cast = ids.datatype === 'INT64' ? BigInt : Number;
    const expert = (i) => cast((3 * Math.floor(i / S) + (i % S)) % groups);
    inputs[ids.name] = { datatype: ids.datatype, shape: [TOKENS, S],
                         data: Type.from({ length: TOKENS * S }, (_, i) => expert(i)) };
    const weights = randomValues(TOKENS * S, 2).map((v) => (v + 1) / 2);
    inputs[w.name] = { datatype: w.datatype, shape: [TOKENS, S],
                       data: encodeFloats(weights, w.datatype) };
  }
  return inputs;
}

// The same request cut to its first `rows` tokens.
function firstTokens(inputs, rows) {
  const cut = {};
  for (const [name, { datatype, shape, data }] of Object.entries(inputs)) {
    cut[name] = { datatype, shape: [rows, shape[1]], data: data.slice(0, rows * shape[1]) };
  }
  return cut;
}

// out is [TOKENS, K] of x's datatype, every value finite.
function checkAnswer(model, layer, out) {
  const ok = out.datatype === layer.x.datatype && out.shape.length === 2 &&
             out.shape[0] === TOKENS && out.shape[1] === layer.K &&
             decodeFloats(out).every(Number.isFinite);
  return report(`${model} ${layer.x.name} [${TOKENS}, ${layer.K}] -> ${layer.out.name} ` +
                `${out.datatype} [${out.shape.join(', ')}], finite`, ok);
}

// Tokens 0..ALONE-1 sent alone against the same rows of the full answer.
function checkAlone(model, layer, full, alone) {
  const rows = ALONE * layer.K;
  const want = decodeFloats(full).subarray(0, rows);
  const got = decodeFloats(alone);
  const largest = want.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
  let worst = got.length === rows ? 0 : Infinity;
  for (let i = 0; i < got.length && i < rows; ++i) {
    worst = Math.max(worst, Math.abs(got[i] - want[i]));
  }
  return report(`${model} tokens 0-${ALONE - 1} alone = rows 0-${ALONE - 1} of the ` +
                `${TOKENS}-token answer (max |diff| ${worst.toExponential(2)}, ` +
                `max |out| ${largest.toFixed(4)})`,
                largest > 0 && worst <= TOLERANCE * largest);
}

async function run(client, model) {
  const layer = await describeLayer(client, model);
  if (!checkLayer(model, layer)) return false;
  const inputs = layerInputs(layer);
  const call = (request) => client.infer(model, request, { timeoutMs: 30000 });
  const full = (await call(inputs))[layer.out.name];
  if (!checkAnswer(model, layer, full)) return false;
  const alone = (await call(firstTokens(inputs, ALONE)))[layer.out.name];
  return checkAlone(model, layer, full, alone);
}

async function main() {
  const url = process.argv[2] || '127.0.0.1:8001';
  const model = process.argv[3] || 'moe_layer';
  const client = new GemmServeClient(url);
  try {
    return (await run(client, model)) ? 0 : 1;
  } catch (error) {
    console.error(`${model} failed: ${error.message}`);
    return 1;
  } finally {
    client.close();
  }
}

main().then((code) => { process.exitCode = code; });
