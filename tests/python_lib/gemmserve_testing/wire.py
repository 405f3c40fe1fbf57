"""Just enough of the protobuf wire format to speak grpc.health.v1 and
grpc.reflection.v1alpha: Debian's python3-grpcio ships neither grpc_health nor
grpc_reflection, nor their .proto files, so their few messages are hand-encoded.
"""


def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def length_delimited(field, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def _read_varint(buf, pos):
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def parse(buf):
    """Returns [(field number, value)]: int for varints, bytes for length-delimited."""
    fields, pos = [], 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _read_varint(buf, pos)
        elif wire_type == 2:
            size, pos = _read_varint(buf, pos)
            value, pos = bytes(buf[pos:pos + size]), pos + size
        elif wire_type == 1:
            value, pos = bytes(buf[pos:pos + 8]), pos + 8
        elif wire_type == 5:
            value, pos = bytes(buf[pos:pos + 4]), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        fields.append((field, value))
    return fields


def values(buf, field):
    return [value for number, value in parse(buf) if number == field]
