#!/usr/bin/env node
'use strict';
// Runs one GroupedMatMul (mixture of experts) on a gemmserve server and checks
// it against a plain JavaScript reference.
//
//   node examples/grouped_matmul.js [URL]      # default 127.0.0.1:8001
//
// 6 tokens [6, 16] each go through 2 of 4 experts [4, 16, 8] with a bias:
// output[m, s] = input[m] @ weights[group_indices[m, s]] + bias[group_indices[m, s]].
// Exits 0 when every element matches, 1 on a mismatch or a failed call.

const { GemmServeClient } = require('..');

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

// The operator's definition, accumulated in doubles.
function referenceGroupedMatMul(x, w, bias, idx, [M, K], [G, , N], S) {
  const out = new Float64Array(M * S * N);
  for (let m = 0; m < M; ++m) {
    for (let s = 0; s < S; ++s) {
      const g = Number(idx[m * S + s]);
      if (g < 0 || g >= G) throw new RangeError(`group index ${g} outside [0, ${G})`);
      for (let n = 0; n < N; ++n) {
        let sum = bias[g * N + n];
        for (let k = 0; k < K; ++k) sum += x[m * K + k] * w[(g * K + k) * N + n];
        out[(m * S + s) * N + n] = sum;
      }
    }
  }
  return out;
}

async function main() {
  const url = process.argv[2] || '127.0.0.1:8001';
  const [M, K, N, G, S] = [6, 16, 8, 4, 2];
  const x = randomValues(M * K, 1);
  const w = randomValues(G * K * N, 2);
  const bias = randomValues(G * N, 3);
  // Token m goes to experts m % G and (m + 1) % G.
  const idx = BigInt64Array.from({ length: M * S },
                                 (_, i) => BigInt((Math.floor(i / S) + (i % S)) % G));

  const client = new GemmServeClient(url);
  try {
    const { output } = await client.infer('grouped_matmul', {
      input: { datatype: 'FP32', shape: [M, K], data: x },
      weights: { datatype: 'FP32', shape: [G, K, N], data: w },
      group_indices: { datatype: 'INT64', shape: [M, S], data: idx },
      bias: { datatype: 'FP32', shape: [G, N], data: bias },
    }, { timeoutMs: 30000 });

    const expected = referenceGroupedMatMul(x, w, bias, idx, [M, K], [G, K, N], S);
    const shapeOk = JSON.stringify(output.shape) === JSON.stringify([M, S, N]) &&
                    output.datatype === 'FP32' && output.data.length === expected.length;
    let worst = 0;
    if (shapeOk) {
      for (let i = 0; i < expected.length; ++i) {
        // FP32 accumulation of K = 16 terms of magnitude <= 1.
        const allowed = 1e-5 * (1 + Math.abs(expected[i]));
        worst = Math.max(worst, Math.abs(output.data[i] - expected[i]) / allowed);
      }
    }
    const ok = shapeOk && worst <= 1;
    console.log(`grouped_matmul FP32 input [${M}, ${K}], weights [${G}, ${K}, ${N}], ` +
                `group_indices [${M}, ${S}], bias [${G}, ${N}] -> [${output.shape.join(', ')}]: ` +
                `${ok ? 'OK' : 'MISMATCH'}`);
    const first = Array.from(output.data.subarray(0, S * N), (v) => v.toFixed(4));
    console.log(`output[0]: ${first.join(' ')}`);
    return ok ? 0 : 1;
  } catch (error) {
    console.error(`grouped_matmul failed: ${error.message}`);
    return 1;
  } finally {
    client.close();
  }
}

main().then((code) => { process.exitCode = code; });
