'use strict';
// HttpClient: gemmserve's HTTP/REST API (the KServe v2 REST binding with Triton's
// binary tensor extension) on Node's global fetch (Node.js >= 18): no npm
// dependencies, no protocol files.
//
// Tensors are the gRPC client's (see tensors.js): {datatype, shape, data} with
// data a typed array, Uint16Array bit patterns for FP16 and BF16. By default
// they travel as raw little-endian bytes after a JSON header (binary: true);
// with binary: false as JSON numbers, written and read exactly (INT64 and UINT64
// as BigInts, never through a double; FP16 and BF16 as their exact values).
// A call the server refuses rejects with an HttpError: `status` is the HTTP
// status, `message` the server's message.
//
//   const { HttpClient } = require('gemmserve-client');
//   const client = new HttpClient('http://127.0.0.1:8000');
//   const { Y } = await client.infer('matmul', {
//     A: { datatype: 'FP32', shape: [2, 3], data: new Float32Array([1, 2, 3, 4, 5, 6]) },
//     B: { datatype: 'FP32', shape: [3, 1], data: new Float32Array([1, 1, 1]) },
//   });
//   // Y: { datatype: 'FP32', shape: [2, 1], data: Float32Array [6, 15] }

const tensors = require('./tensors');

const DEFAULT_HTTP_URL = 'http://127.0.0.1:8000';
const HEADER_LENGTH = 'Inference-Header-Content-Length';

class HttpError extends Error {
  // status: the HTTP status; message: the server's `error` text (or the body
  // itself when it is not the server's JSON).
  constructor(status, message) {
    super(message);
    this.name = 'HttpError';
    this.status = status;
  }
}

// ---- FP16 <-> numbers (exact one way, rounded to nearest even the other) ----

// An IEEE half's bit pattern -> its value (every half is exact in a double).
function halfBitsToNumber(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exponent = (h >>> 10) & 0x1f;
  const fraction = h & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24;
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * (1024 + fraction) * 2 ** (exponent - 25);
}

// Rounds x (a double with few significant bits here) to an integer, ties to even.
function roundHalfEven(x) {
  const floor = Math.floor(x);
  const rest = x - floor;
  return rest > 0.5 || (rest === 0.5 && floor % 2 === 1) ? floor + 1 : floor;
}

// A number -> the bit pattern of the nearest half, ties to even (the server's
// own rounding); beyond the largest half it is an infinity.
function numberToHalfBits(v) {
  if (Number.isNaN(v)) return 0x7e00;
  const sign = v < 0 || Object.is(v, -0) ? 0x8000 : 0;
  const a = Math.abs(v);
  if (a >= 65520) return sign | 0x7c00; // 65520 is halfway from 65504 to 2^16
  // Subnormal; a rounding up to 1024 is the least normal, as it should be.
  if (a < 2 ** -14) return sign | roundHalfEven(a * 2 ** 24);
  let exponent = Math.floor(Math.log2(a));
  // log2 may be off by one next to a power of two: the significand says.
  if (a / 2 ** exponent >= 2) ++exponent;
  if (a / 2 ** exponent < 1) --exponent;
  let significand = roundHalfEven((a / 2 ** exponent) * 1024);
  if (significand === 2048) {
    significand = 1024;
    ++exponent;
  }
  if (exponent + 15 >= 31) return sign | 0x7c00;
  return sign | ((exponent + 15) << 10) | (significand - 1024);
}

// ---- JSON numbers, exactly ----

// A float as JSON text that reads back as the same value: JavaScript's shortest
// form (exact for doubles, and for floats widened to doubles), with -0's sign,
// and NaN and infinities as the server reads them.
function floatText(v) {
  return Object.is(v, -0) ? '-0' : String(v);
}

// A float32 value as the shortest text that reads back as it (0.1, not the
// 0.10000000149011612 of its double). For up to 9 digits, rounding a decimal
// to a double and then to a float (Math.fround here) gives the float that
// rounding it straight to a float gives (the server's from_chars).
function float32Text(v) {
  if (!Number.isFinite(v) || v === 0) return floatText(v);
  for (let digits = 1; digits < 9; ++digits) {
    const shorter = Number(v.toPrecision(digits));
    if (Math.fround(shorter) === v) return String(shorter);
  }
  return String(v);
}

// The `data` text of one tensor (flat, row-major).
function jsonDataText(datatype, data) {
  const parts = new Array(data.length);
  switch (datatype) {
    case 'FP32':
      for (let i = 0; i < data.length; ++i) parts[i] = float32Text(data[i]);
      break;
    case 'FP64':
      for (let i = 0; i < data.length; ++i) parts[i] = floatText(data[i]);
      break;
    case 'BF16': {
      // bfloat16 values are exact in float32, so the server's rounding keeps them.
      const values = tensors.bf16BitsToFloat32(data);
      for (let i = 0; i < data.length; ++i) parts[i] = float32Text(values[i]);
      break;
    }
    case 'FP16':
      for (let i = 0; i < data.length; ++i) parts[i] = floatText(halfBitsToNumber(data[i]));
      break;
    case 'BOOL':
      for (let i = 0; i < data.length; ++i) parts[i] = data[i] ? 'true' : 'false';
      break;
    default:
      // Integers, BigInts included: String() writes them whole, never as doubles.
      for (let i = 0; i < data.length; ++i) parts[i] = String(data[i]);
  }
  return `[${parts.join(',')}]`;
}

// A JSON reader for inference responses. JSON.parse cannot be used: the
// server writes NaN, Infinity and -Infinity (as JavaScript and Python do), and
// INT64/UINT64 data beyond 2^53 would lose digits in doubles. Here an integer
// literal outside the safe range becomes a BigInt; every other number a number.
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
const LITERALS = [['true', true], ['false', false], ['null', null], ['NaN', NaN],
                  ['Infinity', Infinity], ['-Infinity', -Infinity]];
const MAX_DEPTH = 64;

function parseExactJson(text) {
  let pos = 0;
  const fail = (what) => {
    throw new SyntaxError(`the server's JSON: ${what} at offset ${pos}`);
  };
  const skipSpace = () => {
    while (pos < text.length) {
      const c = text.charCodeAt(pos);
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
      ++pos;
    }
  };
  const match = (regex) => {
    regex.lastIndex = pos;
    const found = regex.exec(text);
    if (!found) return null;
    pos = regex.lastIndex;
    return found[0];
  };
  const value = (depth) => {
    if (depth > MAX_DEPTH) fail(`nesting deeper than ${MAX_DEPTH}`);
    skipSpace();
    const c = text[pos];
    if (c === '{') {
      ++pos;
      const object = {};
      skipSpace();
      if (text[pos] === '}') {
        ++pos;
        return object;
      }
      for (;;) {
        skipSpace();
        const key = match(STRING);
        if (key === null) fail('expected a string key');
        skipSpace();
        if (text[pos] !== ':') fail("expected ':'");
        ++pos;
        // defineProperty: a key named __proto__ is data, not the prototype.
        Object.defineProperty(object, JSON.parse(key), {
          value: value(depth + 1), enumerable: true, writable: true, configurable: true,
        });
        skipSpace();
        if (text[pos] === ',') {
          ++pos;
        } else if (text[pos] === '}') {
          ++pos;
          return object;
        } else {
          fail("expected ',' or '}'");
        }
      }
    }
    if (c === '[') {
      ++pos;
      const array = [];
      skipSpace();
      if (text[pos] === ']') {
        ++pos;
        return array;
      }
      for (;;) {
        array.push(value(depth + 1));
        skipSpace();
        if (text[pos] === ',') {
          ++pos;
        } else if (text[pos] === ']') {
          ++pos;
          return array;
        } else {
          fail("expected ',' or ']'");
        }
      }
    }
    if (c === '"') {
      const string = match(STRING);
      if (string === null) fail('bad string');
      return JSON.parse(string);
    }
    const number = match(NUMBER);
    if (number !== null) {
      const v = Number(number);
      if (!Number.isSafeInteger(v) && /^-?\d+$/.test(number)) return BigInt(number);
      return v;
    }
    for (const [word, v] of LITERALS) {
      if (text.startsWith(word, pos)) {
        pos += word.length;
        return v;
      }
    }
    return fail('unexpected character');
  };
  const result = value(0);
  skipSpace();
  if (pos !== text.length) fail('text after the value');
  return result;
}

// JSON `data` (flat or nested) of an output -> the bytes of its typed array.
function jsonDataBytes(tensor) {
  const { name, datatype } = tensor;
  const Type = tensors.ARRAY_OF[datatype];
  if (!Type) throw new Error(`server sent output '${name}' of datatype ${datatype} as JSON`);
  if (!Array.isArray(tensor.data)) throw new Error(`server sent output '${name}' without data`);
  const values = tensor.data.flat(Infinity);
  let array;
  try {
    switch (datatype) {
      case 'BF16':
        array = tensors.float32ToBf16Bits(values.map(Number));
        break;
      case 'FP16':
        array = Uint16Array.from(values, (v) => numberToHalfBits(Number(v)));
        break;
      case 'INT64':
      case 'UINT64':
        array = Type.from(values, (v) => {
          const big = BigInt(v); // a RangeError for a fraction
          if (big !== BigInt[datatype === 'INT64' ? 'asIntN' : 'asUintN'](64, big)) {
            throw new RangeError(`${v} is out of range`);
          }
          return big;
        });
        break;
      default:
        array = Type.from(values, (v) => Number(v));
    }
  } catch (error) {
    throw new Error(`server sent output '${name}' with bad ${datatype} data: ${error.message}`);
  }
  return Buffer.from(array.buffer, array.byteOffset, array.byteLength);
}

function safeCount(value, what) {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`server sent ${what} ${value}`);
  return n;
}

// A response body (a Buffer) and its Inference-Header-Content-Length (null:
// all JSON) -> {name: {datatype, shape, data}}. Binary outputs take their
// bytes in order after the JSON header; tensors.decodeOutputs checks every
// output's size against its shape.
function decodeInferResponse(body, headerLength = null) {
  const jsonLength = headerLength === null || headerLength === undefined
    ? body.length : safeCount(headerLength, HEADER_LENGTH);
  if (jsonLength > body.length) {
    throw new Error(`server sent ${HEADER_LENGTH} ${jsonLength} for a body of ` +
                    `${body.length} bytes`);
  }
  const header = parseExactJson(body.subarray(0, jsonLength).toString('utf8'));
  if (!header || !Array.isArray(header.outputs)) throw new Error('server sent no outputs');
  for (const tensor of header.outputs) {
    if (!tensor || typeof tensor.name !== 'string' || !Array.isArray(tensor.shape)) {
      throw new Error('server sent an output without a name or a shape');
    }
  }
  let offset = jsonLength;
  const raw = header.outputs.map((tensor) => {
    const size = tensor.parameters && tensor.parameters.binary_data_size;
    if (size === undefined) return jsonDataBytes(tensor);
    const n = safeCount(size, `output '${tensor.name}' with binary_data_size`);
    if (offset + n > body.length) {
      throw new Error(`server sent output '${tensor.name}' of ${n} bytes past the body's end`);
    }
    offset += n;
    return body.subarray(offset - n, offset);
  });
  if (offset !== body.length) {
    throw new Error(`server sent ${body.length - offset} bytes after the last binary output`);
  }
  return tensors.decodeOutputs({ outputs: header.outputs, raw_output_contents: raw });
}

// {name: {datatype?, shape, data}} -> {body, headerLength}: the body of a
// request, its JSON and, with binary, the tensors' bytes after it (headerLength
// is then the JSON's length in bytes, for Inference-Header-Content-Length;
// else null). `outputs`: names wanted
// (default all); `id`, `parameters`: the request's own.
function encodeInferRequest(inputs, { outputs, binary = true, id, parameters } = {}) {
  const { tensors: specs, raw, arrays } = tensors.encodeInputs(inputs);
  const head = {};
  if (id !== undefined && id !== null) head.id = String(id);
  const params = { ...(parameters || {}) };
  // All outputs binary: per output when they are named, else for the request
  // (unless the caller's parameters say otherwise).
  if (binary && !outputs && !('binary_data_output' in params)) params.binary_data_output = true;
  if (Object.keys(params).length) head.parameters = params;
  if (outputs) {
    head.outputs = outputs.map((name) => (binary ? { name, parameters: { binary_data: true } }
                                                 : { name }));
  }
  const inputTexts = specs.map((spec, i) => {
    const tensor = { name: spec.name, shape: spec.shape, datatype: spec.datatype };
    if (binary) {
      tensor.parameters = { binary_data_size: raw[i].length };
      return JSON.stringify(tensor);
    }
    const data = jsonDataText(spec.datatype, arrays[i]);
    return `${JSON.stringify(tensor).slice(0, -1)},"data":${data}}`;
  });
  const headText = JSON.stringify(head);
  const text = `${headText.slice(0, -1)}${headText.length > 2 ? ',' : ''}"inputs":[` +
               `${inputTexts.join(',')}]}`;
  const header = Buffer.from(text, 'utf8');
  if (!binary) return { body: header, headerLength: null };
  return { body: Buffer.concat([header, ...raw]), headerLength: header.length };
}

function modelPath(name, version) {
  if (typeof name !== 'string' || name === '') throw new TypeError('a model name is needed');
  let path = `/v2/models/${encodeURIComponent(name)}`;
  if (version) path += `/versions/${encodeURIComponent(version)}`;
  return path;
}

// (name, version) or (name, {version, timeoutMs}), as the gRPC client takes them.
function versionAndOptions(versionOrOptions, options) {
  if (versionOrOptions !== null && typeof versionOrOptions === 'object') {
    return { version: versionOrOptions.version || '', options: versionOrOptions };
  }
  return { version: versionOrOptions || '', options: options || {} };
}

// Header sets merged without regard to case, later ones winning (a plain
// object spread would send both 'Accept-Encoding' and 'accept-encoding').
function mergeHeaders(...sources) {
  const merged = new Headers();
  for (const source of sources) {
    for (const [name, value] of new Headers(source || {})) merged.set(name, value);
  }
  return merged;
}

async function errorOf(response) {
  const text = await response.text();
  let message = text || response.statusText;
  try {
    const parsed = JSON.parse(text);
    if (parsed && typeof parsed.error === 'string') message = parsed.error;
  } catch (_) {
    // Not the server's JSON (a proxy's page, say): the text as it is.
  }
  return new HttpError(response.status, message);
}

class HttpClient {
  // baseUrl: "http://host:port" or "https://host:port" (a path prefix is kept,
  // for a server behind a proxy). Options:
  //   token: sent as `Authorization: Bearer <token>` (the server's --auth_token_file)
  //   headers: more headers for every request
  //   timeoutMs: default for every call (default: none)
  constructor(baseUrl = DEFAULT_HTTP_URL, { token, headers, timeoutMs } = {}) {
    tensors.assertLittleEndian();
    if (typeof fetch !== 'function') {
      throw new Error('HttpClient needs the global fetch of Node.js 18 or later');
    }
    const url = new URL(baseUrl);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new TypeError(`expected an http:// or https:// URL, got '${baseUrl}'`);
    }
    this.baseUrl = url.href.replace(/\/+$/, '');
    // identity: fetch would otherwise ask for gzip, and the server would spend
    // time compressing tensor bytes that hardly compress. headers can ask anyway.
    this._headers = mergeHeaders({ 'Accept-Encoding': 'identity' }, headers,
                                 token ? { Authorization: `Bearer ${token}` } : {});
    this._timeoutMs = timeoutMs;
  }

  // The fetch Response of one call (any status). A timeout rejects with a
  // DOMException named 'TimeoutError'.
  async request(method, path, { body, headers, timeoutMs } = {}) {
    const timeout = timeoutMs === undefined ? this._timeoutMs : timeoutMs;
    return fetch(this.baseUrl + path, {
      method,
      headers: mergeHeaders(this._headers, headers),
      body,
      signal: timeout === undefined || timeout === Infinity ? undefined
                                                           : AbortSignal.timeout(timeout),
    });
  }

  // true for 200, false for 400 (the server's "no"), an HttpError otherwise.
  async _yesNo(path, timeoutMs) {
    const response = await this.request('GET', path, { timeoutMs });
    if (response.status === 200 || response.status === 400) {
      await response.arrayBuffer(); // read, so the connection is reused
      return response.status === 200;
    }
    throw await errorOf(response);
  }

  async _json(method, path, { body, timeoutMs } = {}) {
    const headers = body === undefined ? {} : { 'Content-Type': 'application/json' };
    const response = await this.request(method, path, { body, headers, timeoutMs });
    if (!response.ok) throw await errorOf(response);
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }

  serverLive({ timeoutMs } = {}) {
    return this._yesNo('/v2/health/live', timeoutMs);
  }

  // false while the server drains (after SIGTERM).
  serverReady({ timeoutMs } = {}) {
    return this._yesNo('/v2/health/ready', timeoutMs);
  }

  // false for a model the server does not serve (it answers 400, not 404).
  modelReady(name, versionOrOptions, options) {
    const { version, options: { timeoutMs } } = versionAndOptions(versionOrOptions, options);
    return this._yesNo(`${modelPath(name, version)}/ready`, timeoutMs);
  }

  // {name, version, extensions}
  serverMetadata({ timeoutMs } = {}) {
    return this._json('GET', '/v2', { timeoutMs });
  }

  // {name, versions, platform, inputs, outputs}
  modelMetadata(name, versionOrOptions, options) {
    const { version, options: { timeoutMs } } = versionAndOptions(versionOrOptions, options);
    return this._json('GET', modelPath(name, version), { timeoutMs });
  }

  // Triton's ModelConfig itself ({name, platform, input, output, ...}), as Triton
  // answers it over HTTP (gRPC wraps it in {config}).
  modelConfig(name, versionOrOptions, options) {
    const { version, options: { timeoutMs } } = versionAndOptions(versionOrOptions, options);
    return this._json('GET', `${modelPath(name, version)}/config`, { timeoutMs });
  }

  // {model_stats: [...]} of one model, or of all without a name.
  modelStatistics(name, versionOrOptions, options) {
    const { version, options: { timeoutMs } } = versionAndOptions(versionOrOptions, options);
    const path = name ? `${modelPath(name, version)}/stats` : '/v2/models/stats';
    return this._json('GET', path, { timeoutMs });
  }

  // [{name, version, state, reason}]; ready: only the ready models.
  repositoryIndex({ ready = false, timeoutMs } = {}) {
    return this._json('POST', '/v2/repository/index',
                      { body: JSON.stringify(ready ? { ready: true } : {}), timeoutMs });
  }

  // Runs `model` on `inputs` = {name: {datatype, shape, data}} and resolves to
  // {output name: {datatype, shape, data}}, as the gRPC client does. Options:
  //   outputs: names of the outputs wanted (default all)
  //   version: the model's version (default the served one)
  //   binary: tensors as raw bytes (default true), or as JSON numbers
  //   timeoutMs: the call's timeout; id, parameters: the request's own
  //   (parameters: {priority, timeout (microseconds)}, as on gRPC)
  // Malformed inputs reject with a TypeError or RangeError before anything is sent.
  async infer(model, inputs, { outputs, version = '', binary = true, timeoutMs, id,
                               parameters } = {}) {
    const path = `${modelPath(model, version)}/infer`;
    const { body, headerLength } = encodeInferRequest(inputs, { outputs, binary, id, parameters });
    const headers = { 'Content-Type': binary ? 'application/octet-stream' : 'application/json' };
    if (headerLength !== null) headers[HEADER_LENGTH] = String(headerLength);
    const response = await this.request('POST', path, { body, headers, timeoutMs });
    if (!response.ok) throw await errorOf(response);
    const received = Buffer.from(await response.arrayBuffer());
    return decodeInferResponse(received, response.headers.get(HEADER_LENGTH));
  }
}

module.exports = {
  DEFAULT_HTTP_URL,
  HttpClient,
  HttpError,
  decodeInferResponse,
  encodeInferRequest,
  halfBitsToNumber,
  numberToHalfBits,
  parseExactJson,
};
