"""System shared memory for local clients (Triton's extension).

A client on the server's host puts tensors in a POSIX shared-memory object
and sends references; the bytes cross no socket. The server must run with
--allow_client_shm.

    from gemmserve_client import shared_memory as shm
    region = shm.SharedMemoryRegion.create("/my_inputs", a.nbytes + y_bytes)
    region.write(a, offset=0)
    shm.register(stub, "inputs", region)
    request = make_infer_request("matmul", {"B": b}, outputs=["Y"])
    shm.use_for_input(request, "A", a, "inputs", offset=0)   # A's bytes stay in the region
    shm.use_for_output(request, "Y", "inputs", y_bytes, offset=a.nbytes)
    response = stub.ModelInfer(request)
    y = region.read(np.float32, response.outputs[0].shape, offset=a.nbytes)
    shm.unregister(stub, "inputs")
    region.close()                                            # unlinks what it created
"""
import mmap
import os

import numpy as np

from .tensors import DTYPE_OF, datatype_of, pb2

_SHM_DIR = "/dev/shm"


def _check_key(key):
    if not (isinstance(key, str) and key.startswith("/") and len(key) >= 2
            and "/" not in key[1:] and len(key) <= 255):
        raise ValueError(f"shared memory key {key!r} is not '/NAME' (NAME without '/')")


class SharedMemoryRegion:
    """A POSIX shared-memory object mapped in this process."""

    def __init__(self, key, fd, byte_size, owner):
        self.key = key
        self.byte_size = byte_size
        self._fd = fd
        self._owner = owner
        self._map = mmap.mmap(fd, byte_size) if byte_size else None

    @classmethod
    def create(cls, key, byte_size):
        """Creates the object (it must not exist) with `byte_size` zero bytes."""
        _check_key(key)
        if byte_size <= 0:
            raise ValueError("a shared memory region needs a positive byte size")
        fd = os.open(_SHM_DIR + key, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, byte_size)
            return cls(key, fd, byte_size, owner=True)
        except BaseException:
            os.close(fd)
            os.unlink(_SHM_DIR + key)
            raise

    def write(self, array, offset=0):
        """Copies the array's bytes (C order) into the region at `offset`."""
        data = np.ascontiguousarray(array).tobytes()
        if offset < 0 or offset + len(data) > self.byte_size:
            raise ValueError(f"{len(data)} bytes at offset {offset} pass the region's "
                             f"{self.byte_size}")
        self._map[offset:offset + len(data)] = data
        return len(data)

    def read(self, dtype, shape, offset=0):
        """A copy of the region's bytes at `offset` as an array of `dtype` and `shape`."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        size = count * dtype.itemsize
        if offset < 0 or offset + size > self.byte_size:
            raise ValueError(f"{size} bytes at offset {offset} pass the region's "
                             f"{self.byte_size}")
        return np.frombuffer(self._map[offset:offset + size], dtype=dtype).reshape(shape).copy()

    def truncate(self, byte_size):
        """Shrinks (or grows) the object itself, as a careless owner might."""
        if self._map is not None:
            self._map.close()
            self._map = None
        os.ftruncate(self._fd, byte_size)

    def close(self):
        """Unmaps and closes; unlinks the object if this process created it."""
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            if self._owner:
                try:
                    os.unlink(_SHM_DIR + self.key)
                except FileNotFoundError:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def register(stub, name, region, offset=0, byte_size=None, timeout=10.0, metadata=None):
    """SystemSharedMemoryRegister of `region` (a window of it with offset/byte_size)."""
    size = region.byte_size - offset if byte_size is None else byte_size
    return stub.SystemSharedMemoryRegister(
        pb2.SystemSharedMemoryRegisterRequest(name=name, key=region.key, offset=offset,
                                              byte_size=size),
        timeout=timeout, metadata=metadata)


def unregister(stub, name="", timeout=10.0, metadata=None):
    """SystemSharedMemoryUnregister of one region ("" for all of the caller's)."""
    return stub.SystemSharedMemoryUnregister(
        pb2.SystemSharedMemoryUnregisterRequest(name=name), timeout=timeout, metadata=metadata)


def status(stub, name="", timeout=10.0, metadata=None):
    """{region name: RegionStatus} of the caller's regions (or of one)."""
    response = stub.SystemSharedMemoryStatus(
        pb2.SystemSharedMemoryStatusRequest(name=name), timeout=timeout, metadata=metadata)
    return dict(response.regions)


def _set_parameters(parameters, region_name, byte_size, offset):
    parameters["shared_memory_region"].string_param = region_name
    parameters["shared_memory_byte_size"].int64_param = byte_size
    if offset:
        parameters["shared_memory_offset"].int64_param = offset


def use_for_input(request, name, array, region_name, offset=0, datatype=None):
    """Adds input `name` to `request`: its shape and datatype from `array`,
    its bytes read by the server from the region (write them there first)."""
    datatype = datatype or datatype_of(array)
    tensor = request.inputs.add(name=name, datatype=datatype, shape=list(np.shape(array)))
    nbytes = int(np.prod(np.shape(array), dtype=np.int64)) * DTYPE_OF[datatype].itemsize
    _set_parameters(tensor.parameters, region_name, nbytes, offset)
    return tensor


def use_for_output(request, name, region_name, byte_size, offset=0):
    """Asks for output `name` to be written into the region instead of the response."""
    output = request.outputs.add(name=name)
    _set_parameters(output.parameters, region_name, byte_size, offset)
    return output
