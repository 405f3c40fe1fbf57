'use strict';
// Typed arrays <-> KServe v2 tensors (ModelInferRequest inputs, ModelInferResponse outputs).
//
// A tensor is {datatype, shape, data}: data is the typed array of the datatype
// below, row-major. Tensors travel as little-endian raw bytes, which is the
// typed arrays' own layout on every platform Node.js runs on but big-endian
// ones (refused). JavaScript has no 16-bit floats: FP16 and BF16 tensors are
// Uint16Arrays of their bit patterns; float32ToBf16Bits / bf16BitsToFloat32
// convert BF16.

const os = require('node:os');

// KServe datatype -> typed array class of its elements.
const ARRAY_OF = Object.freeze({
  BOOL: Uint8Array,
  INT8: Int8Array,
  INT16: Int16Array,
  INT32: Int32Array,
  INT64: BigInt64Array,
  UINT8: Uint8Array,
  UINT16: Uint16Array,
  UINT32: Uint32Array,
  UINT64: BigUint64Array,
  FP16: Uint16Array, // bit patterns
  FP32: Float32Array,
  FP64: Float64Array,
  BF16: Uint16Array, // bit patterns
});

// Typed array class -> datatype, for inputs given without one. Uint16Array
// (UINT16, FP16 or BF16) and Uint8Array (UINT8 or BOOL) must say which.
const DATATYPE_OF = new Map([
  [Int8Array, 'INT8'],
  [Int16Array, 'INT16'],
  [Int32Array, 'INT32'],
  [BigInt64Array, 'INT64'],
  [Uint32Array, 'UINT32'],
  [BigUint64Array, 'UINT64'],
  [Float32Array, 'FP32'],
  [Float64Array, 'FP64'],
]);

function assertLittleEndian() {
  if (os.endianness() !== 'LE') {
    throw new Error('gemmserve-client sends typed arrays as raw little-endian bytes: ' +
                    'this big-endian platform is not supported');
  }
}

function elementCount(shape, what) {
  if (!Array.isArray(shape)) throw new TypeError(`${what}: shape must be an array of integers`);
  let count = 1;
  for (const dim of shape) {
    if (!Number.isSafeInteger(dim) || dim < 0) {
      throw new TypeError(`${what}: shape [${shape}] has a dimension that is not a ` +
                          'non-negative integer');
    }
    count *= dim;
  }
  if (!Number.isSafeInteger(count)) throw new RangeError(`${what}: shape [${shape}] is too large`);
  return count;
}

// The typed array holding `data` as `datatype`: the array itself when it is
// already of the right class, a conversion of a plain Array, else a TypeError
// (converting between typed arrays would hide mistakes such as floats sent as BF16).
function toTypedArray(name, datatype, data) {
  const Type = ARRAY_OF[datatype];
  if (data instanceof Type) return data;
  if (Array.isArray(data)) {
    if (datatype === 'FP16' || datatype === 'BF16') {
      throw new TypeError(`input '${name}': ${datatype} data must be a Uint16Array of bit ` +
                          'patterns (see float32ToBf16Bits)');
    }
    if (Type === BigInt64Array || Type === BigUint64Array) {
      return Type.from(data, (v) => BigInt(v));
    }
    return Type.from(data, (v) => Number(v));
  }
  const got = data && data.constructor ? data.constructor.name : typeof data;
  throw new TypeError(`input '${name}': ${datatype} data must be a ${Type.name} or an Array, ` +
                      `got ${got}`);
}

// {name: {datatype?, shape, data}} -> the `inputs` and `raw_input_contents`
// of a ModelInferRequest, and the typed arrays they were taken from (`arrays`,
// for the HTTP client's JSON numbers). Throws TypeError/RangeError on anything
// malformed.
function encodeInputs(inputs) {
  if (inputs === null || typeof inputs !== 'object') {
    throw new TypeError('inputs must be an object {name: {datatype, shape, data}}');
  }
  const tensors = [];
  const raw = [];
  const arrays = [];
  for (const [name, tensor] of Object.entries(inputs)) {
    if (tensor === null || typeof tensor !== 'object') {
      throw new TypeError(`input '${name}' must be {datatype, shape, data}`);
    }
    let datatype = tensor.datatype;
    if (datatype === undefined) {
      datatype = tensor.data && DATATYPE_OF.get(tensor.data.constructor);
      if (!datatype) {
        throw new TypeError(`input '${name}': name its datatype (a ` +
                            `${tensor.data && tensor.data.constructor.name} could be several)`);
      }
    }
    if (!Object.prototype.hasOwnProperty.call(ARRAY_OF, datatype)) {
      throw new TypeError(`input '${name}': unknown datatype '${datatype}'`);
    }
    const count = elementCount(tensor.shape, `input '${name}'`);
    const data = toTypedArray(name, datatype, tensor.data);
    if (data.length !== count) {
      throw new RangeError(`input '${name}': shape [${tensor.shape}] holds ${count} ` +
                           `elements, data has ${data.length}`);
    }
    tensors.push({ name, datatype, shape: tensor.shape });
    raw.push(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    arrays.push(data);
  }
  return { tensors, raw, arrays };
}

// A ModelInferResponse -> {name: {datatype, shape, data}}. The server's answer
// is checked, not trusted: every output needs raw contents of exactly its
// shape's size. Datatypes without a typed array (BYTES) keep data as a Buffer.
function decodeOutputs(response) {
  const outputs = response.outputs || [];
  const raw = response.raw_output_contents || [];
  if (raw.length !== outputs.length) {
    throw new Error(`server sent ${outputs.length} outputs but ${raw.length} raw output contents`);
  }
  const result = {};
  outputs.forEach((tensor, i) => {
    const shape = tensor.shape.map((dim) => {
      const value = Number(dim);
      if (!Number.isSafeInteger(value) || value < 0) {
        throw new Error(`server sent output '${tensor.name}' with dimension ${dim}`);
      }
      return value;
    });
    const bytes = raw[i];
    const Type = ARRAY_OF[tensor.datatype];
    let data = Buffer.from(bytes);
    if (Type) {
      const expected = elementCount(shape, `output '${tensor.name}'`) * Type.BYTES_PER_ELEMENT;
      if (bytes.length !== expected) {
        throw new Error(`server sent output '${tensor.name}' of shape [${shape}] and datatype ` +
                        `${tensor.datatype} with ${bytes.length} bytes, expected ${expected}`);
      }
      // A copy: the received bytes may sit at any offset of a shared buffer,
      // and typed arrays need their own alignment.
      const copy = new ArrayBuffer(bytes.length);
      new Uint8Array(copy).set(bytes);
      data = new Type(copy);
    }
    result[tensor.name] = { datatype: tensor.datatype, shape, data };
  });
  return result;
}

// float32 values -> bfloat16 bit patterns, rounded to nearest, ties to even;
// NaN stays a (quiet) NaN.
function float32ToBf16Bits(values) {
  const floats = Float32Array.from(values);
  const bits = new Uint32Array(floats.buffer);
  const out = new Uint16Array(floats.length);
  for (let i = 0; i < bits.length; ++i) {
    const b = bits[i];
    if (Number.isNaN(floats[i])) {
      out[i] = (b >>> 16) | 0x0040;
    } else {
      // In doubles, so the sum cannot overflow 32 bits.
      out[i] = Math.floor((b + 0x7fff + ((b >>> 16) & 1)) / 65536);
    }
  }
  return out;
}

// bfloat16 bit patterns -> float32 values (exact).
function bf16BitsToFloat32(bits) {
  const wide = new Uint32Array(bits.length);
  for (let i = 0; i < bits.length; ++i) wide[i] = bits[i] << 16;
  return new Float32Array(wide.buffer);
}

module.exports = {
  ARRAY_OF,
  assertLittleEndian,
  bf16BitsToFloat32,
  decodeOutputs,
  elementCount,
  encodeInputs,
  float32ToBf16Bits,
};
