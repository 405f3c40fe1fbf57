#!/usr/bin/env node
'use strict';
// Runs one MatMul on a gemmserve server over HTTP/REST, once in Triton's binary
// tensor extension and once as JSON numbers, and checks both against a plain
// JavaScript reference.
//
//   node examples/http_matmul.js [URL]      # default http://127.0.0.1:8000
//
// A [4, 32] x [32, 8] FP32 product; exits 0 when every element matches in both
// forms, 1 on a mismatch or a failed call.

const { HttpClient } = require('../lib/http');

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

// C = A @ B, accumulated in doubles.
function referenceMatMul(a, b, M, K, N) {
  const c = new Float64Array(M * N);
  for (let m = 0; m < M; ++m) {
    for (let n = 0; n < N; ++n) {
      let sum = 0;
      for (let k = 0; k < K; ++k) sum += a[m * K + k] * b[k * N + n];
      c[m * N + n] = sum;
    }
  }
  return c;
}

function check(label, Y, expected, [M, K, N]) {
  const shapeOk = JSON.stringify(Y.shape) === JSON.stringify([M, N]) && Y.datatype === 'FP32' &&
                  Y.data.length === expected.length;
  let worst = 0;
  if (shapeOk) {
    for (let i = 0; i < expected.length; ++i) {
      // FP32 accumulation of K = 32 terms of magnitude <= 1.
      const allowed = 1e-5 * (1 + Math.abs(expected[i]));
      worst = Math.max(worst, Math.abs(Y.data[i] - expected[i]) / allowed);
    }
  }
  const ok = shapeOk && worst <= 1;
  console.log(`matmul FP32 ${label} A [${M}, ${K}] x B [${K}, ${N}] -> ` +
              `[${Y.shape.join(', ')}]: ${ok ? 'OK' : 'MISMATCH'}`);
  return ok;
}

async function main() {
  const url = process.argv[2] || 'http://127.0.0.1:8000';
  const [M, K, N] = [4, 32, 8];
  const a = randomValues(M * K, 1);
  const b = randomValues(K * N, 2);
  const inputs = {
    A: { datatype: 'FP32', shape: [M, K], data: a },
    B: { datatype: 'FP32', shape: [K, N], data: b },
  };
  const expected = referenceMatMul(a, b, M, K, N);
  const client = new HttpClient(url, { timeoutMs: 30000 });
  try {
    const binary = (await client.infer('matmul', inputs)).Y;
    const json = (await client.infer('matmul', inputs, { binary: false })).Y;
    const okBinary = check('binary', binary, expected, [M, K, N]);
    const okJson = check('json', json, expected, [M, K, N]);
    // The same floats either way: JSON numbers are written and read exactly.
    const same = Buffer.from(binary.data.buffer).equals(Buffer.from(json.data.buffer));
    console.log(`binary and json outputs ${same ? 'identical' : 'DIFFER'}`);
    return okBinary && okJson && same ? 0 : 1;
  } catch (error) {
    console.error(`http_matmul failed: ${error.message}`);
    return 1;
  }
}

main().then((code) => { process.exitCode = code; });
