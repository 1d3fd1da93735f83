"""A small reader and writer of the safetensors format (8-byte little-endian
header length, a JSON header, then raw little-endian tensor bytes), so the
reference needs nothing beyond PyTorch and NumPy."""
import json
import os
import struct

import numpy as np
import torch

_DTYPES = {
    "F32": (np.float32, torch.float32), "F64": (np.float64, torch.float64),
    "I64": (np.int64, torch.int64), "I32": (np.int32, torch.int32),
    "I16": (np.int16, torch.int16), "U8": (np.uint8, torch.uint8),
    "U16": (np.uint16, None), "BOOL": (np.bool_, torch.bool),
}
_NAMES = {np.dtype(v[0]): k for k, v in _DTYPES.items()}


def save(path, tensors, metadata=None):
    """Write {name: tensor or ndarray} atomically (temp file, fsync, rename)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        a = np.ascontiguousarray(a)
        if a.dtype not in _NAMES:
            raise ValueError(f"{name}: dtype {a.dtype} is not supported")
        b = a.tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path, as_numpy=False):
    """Read a file; returns ({name: tensor}, metadata). Errors name the file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    out, base = {}, 8 + n
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        np_t, _ = _DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        if base + e > len(data):
            raise ValueError(f"{path}: tensor {name} runs past the end of the file (truncated?)")
        a = np.frombuffer(data, dtype=np_t, count=(e - b) // np.dtype(np_t).itemsize, offset=base + b).reshape(info["shape"])
        if as_numpy:
            out[name] = a.copy()
        else:
            # torch 1.13 has no uint16: widen it (expert IDs past 255 experts).
            out[name] = torch.from_numpy(a.astype(np.int32) if _DTYPES[info["dtype"]][1] is None else a.copy())
    return out, meta
