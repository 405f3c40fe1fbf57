'use strict';
// Plain JavaScript references and inputs shared by the Node client's tests
// (client.test.js over gRPC, http.test.js over HTTP).

// C = A @ B for row-major [M, K] x [K, N], with `add` and `mul` of the element type.
function matmul(a, b, M, K, N, { zero = 0, add = (x, y) => x + y, mul = (x, y) => x * y } = {}) {
  const c = [];
  for (let m = 0; m < M; ++m) {
    for (let n = 0; n < N; ++n) {
      let sum = zero;
      for (let k = 0; k < K; ++k) sum = add(sum, mul(a[m * K + k], b[k * N + n]));
      c.push(sum);
    }
  }
  return c;
}

// output[m, s, :] = x[m, :] @ w[idx[m, s]] + bias[idx[m, s]], flat; idx holds BigInts.
function groupedMatmul(x, w, idx, bias, M, K, N, S) {
  const want = [];
  for (let m = 0; m < M; ++m) {
    for (let s = 0; s < S; ++s) {
      const g = Number(idx[m * S + s]);
      for (let n = 0; n < N; ++n) {
        let sum = bias ? bias[g * N + n] : 0;
        for (let k = 0; k < K; ++k) sum += x[m * K + k] * w[(g * K + k) * N + n];
        want.push(sum);
      }
    }
  }
  return want;
}

// A small deterministic generator (mulberry32), values in [-1, 1).
function randomFloats(count, seed) {
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

module.exports = { groupedMatmul, matmul, randomFloats };
