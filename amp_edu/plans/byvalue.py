"""Values that leave a learner's kernel *by value*: plain data and plain tensors, nothing that runs.

A check's verdict must not depend on an object the learner made. A returned ``float`` subclass
whose ``__eq__`` always says ``True``, a ``torch.Tensor`` subclass whose ``__torch_function__``
answers whatever ``torch.equal`` asks, a list whose ``__len__`` lies: each of these is code, and
code runs wherever the object goes. So what a plan hands back is written as *bytes that cannot
carry code* and the judge rebuilds the values from the bytes alone, the way safetensors stores
weights — a JSON header, then the tensors' raw bytes::

    b"AMPV1" | 8-byte header length | JSON header | tensor bytes ...

The JSON is parsed by :func:`json.loads`, which makes only ``dict``/``list``/``str``/``int``/
``float``/``bool``/``None``; a tensor is rebuilt with :func:`torch.frombuffer` from its dtype,
shape and byte range. Nothing is unpickled, so nothing the learner defined can run in the judge,
and every value the judge compares has an exact built-in type.

What cannot travel becomes a :class:`Foreign` marker naming its type (``"a numpy.ndarray"``, ``"a
torch.Tensor subclass Liar"``), so the judge fails it with a message that names the problem
instead of comparing it. Exact numpy scalars (``numpy.float64`` ...) are turned into Python
numbers on the way out, as ``float(x)`` would: returning ``np.float64(...)`` is an honest answer.

The header's nodes: ``None``, bools, ints, floats (NaN, ±inf and -0.0 included) and strings are
themselves; a dict whose keys are all strings is a JSON object; everything else is a JSON array
whose first item is a tag: ``["L", items...]`` a list, ``["U", ...]`` a tuple, ``["S", ...]`` a
set, ``["D", [key, value], ...]`` any other dict, ``["T", dtype, shape, offset, nbytes]`` a
tensor, ``["B", hex]`` bytes, ``["dtype", "float16"]``, ``["X", "a <type>"]`` foreign.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import torch

__all__ = ["Foreign", "ByValueError", "encode", "decode", "dumps", "loads", "save", "load", "roundtrip",
           "MAX_BYTES", "MAX_DEPTH"]

MAGIC = b"AMPV1"
MAX_DEPTH = 64                      # nesting deeper than this is refused (a cycle, or an attack)
MAX_BYTES = 512 * 2 ** 20           # a saved answer larger than this is not read
_SCALARS = {id(t) for t in (type(None), bool, int, float, str)}
_CONTAINERS = {id(list): "L", id(tuple): "U", id(set): "S", id(frozenset): "S"}


class ByValueError(ValueError):
    """The bytes do not hold a by-value answer (not this format, too deep, too large, inconsistent)."""


class Foreign:
    """Something the learner returned that is not plain data; compares unequal to everything."""

    __slots__ = ("what",)

    def __init__(self, what: str):
        self.what = what

    def __repr__(self) -> str:
        return f"<{self.what}, not a plain value>"

    def __eq__(self, other) -> bool:
        return False

    __hash__ = None


# -- the kernel's side ------------------------------------------------------------------------
def _describe(x) -> str:
    t = type(x)
    name = f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__
    if t is torch.Tensor:
        return f"a {x.device.type} torch.Tensor" if x.device.type != "cpu" else "a torch.Tensor"
    if isinstance(x, torch.Tensor):
        return f"a torch.Tensor subclass {name}"
    for base in (bool, int, float, str, bytes, list, tuple, dict, set):
        if t is base:
            return f"a {name}"
        if isinstance(x, base):
            return f"a {base.__name__} subclass {name}"
    return f"a {name}"


def _numpy_scalar(x):
    """``x`` as a Python number when it is an exact numpy scalar, else ``None``."""
    import numpy as np

    t = type(x)
    if t is np.float16 or t is np.float32 or t is np.float64:
        return float(x)
    if t is np.bool_:
        return bool(x)
    if any(t is c for c in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)):
        return int(x)
    return None


class _Writer:
    def __init__(self):
        self.chunks: list[bytes] = []
        self.size = 0

    def node(self, x, depth: int = 0):
        """``x``'s node; a value whose reading raises (a lying ``__iter__``, a meta tensor's bytes)
        becomes a marker on its own, and the rest of the answer still travels."""
        try:
            return self._node(x, depth)
        except Exception as exc:  # noqa: BLE001 - whatever a learner's object does when read
            return ["X", f"{_describe(x)} that could not be read ({type(exc).__name__})"]

    def _node(self, x, depth: int):
        if depth > MAX_DEPTH:
            return ["X", f"a value nested deeper than {MAX_DEPTH} levels"]
        t = type(x)
        if id(t) in _SCALARS:
            return x
        if t is torch.Tensor:
            return self.tensor(x)
        tag = _CONTAINERS.get(id(t))
        if tag == "S":
            odd = next((v for v in x if id(type(v)) not in _SCALARS and not (
                type(v) is tuple and all(id(type(u)) in _SCALARS for u in v))), None)
            if odd is not None:              # only plain scalars make a set the judge can rebuild
                return ["X", f"a set holding {_describe(odd)}"]
        if tag is not None:
            items = sorted(x, key=repr) if tag == "S" else x
            if all(id(type(v)) in _SCALARS for v in items):      # the common cases, in one step
                return [tag, *items]
            if all(type(v) is tuple and all(id(type(u)) in _SCALARS for u in v) for v in items):
                return [tag, *(["U", *v] for v in items)]
            return [tag, *(self.node(v, depth + 1) for v in items)]
        if t is dict:
            if all(type(k) is str for k in x):
                return {k: self.node(v, depth + 1) for k, v in x.items()}
            return ["D", *([self.node(k, depth + 1), self.node(v, depth + 1)] for k, v in x.items())]
        if t is bytes:
            return ["B", x.hex()]
        if t is torch.dtype:
            return ["dtype", str(x).removeprefix("torch.")]
        if t.__module__ == "numpy":
            number = _numpy_scalar(x)
            if number is not None:
                return number
        return ["X", _describe(x)]

    def tensor(self, t: torch.Tensor):
        if t.layout is not torch.strided:
            return ["X", f"a {t.layout} tensor"]
        flat = t.detach().to("cpu").contiguous().reshape(-1)
        data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
        node = ["T", str(t.dtype).removeprefix("torch."), list(t.shape), self.size, len(data)]
        self.chunks.append(data)
        self.size += len(data)
        return node


def encode(x: Any) -> tuple[str, list[bytes]]:
    """The JSON header and the tensor bytes of ``x``. Never raises for what a learner returns."""
    w = _Writer()
    try:
        root = w.node(x)
    except Exception as exc:  # noqa: BLE001 - a value whose repr or iteration raises is not plain
        w, root = _Writer(), ["X", f"a value that could not be read ({type(exc).__name__})"]
    return json.dumps(root, allow_nan=True), w.chunks


def dumps(x: Any) -> bytes:
    header, chunks = encode(x)
    head = header.encode()
    return b"".join([MAGIC, struct.pack("<Q", len(head)), head, *chunks])


def save(value: Any, path) -> None:
    """Write ``value`` by value to ``path`` (the plan's result; the judge's inputs)."""
    with open(path, "wb") as f:
        f.write(dumps(value))


# -- the judge's side -------------------------------------------------------------------------
def _dtype(name) -> torch.dtype:
    dtype = getattr(torch, name, None) if type(name) is str else None
    if type(dtype) is not torch.dtype:
        raise ByValueError(f"an unknown dtype {name!r}")
    return dtype


class _Reader:
    def __init__(self, blob: bytes):
        self.blob = blob

    def node(self, n, depth: int = 0):
        if depth > MAX_DEPTH + 1:
            raise ByValueError(f"nested deeper than {MAX_DEPTH} levels")
        t = type(n)
        if t is dict:
            return {k: self.node(v, depth + 1) for k, v in n.items()}
        if t is not list:
            return n                           # json.loads made it: None, bool, int, float or str
        if not n or type(n[0]) is not str:
            raise ByValueError("an array without a tag")
        tag, body = n[0], n[1:]
        flat = not any(type(v) is list or type(v) is dict for v in body)     # scalars only: as they are
        if tag == "L":
            return body if flat else [self.node(v, depth + 1) for v in body]
        if tag == "U":
            return tuple(body) if flat else tuple(self.node(v, depth + 1) for v in body)
        if tag == "S":
            try:
                return {self.node(v, depth + 1) for v in body}
            except TypeError:
                raise ByValueError("a set holding an unhashable value") from None
        if tag == "D":
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise ByValueError("a dict entry that is not a key/value pair")
                key = self.node(pair[0], depth + 1)
                try:
                    out[key] = self.node(pair[1], depth + 1)
                except TypeError:
                    raise ByValueError("an unhashable dict key") from None
            return out
        if tag == "T":
            return self.tensor(body)
        if tag == "B" and len(body) == 1 and type(body[0]) is str:
            try:
                return bytes.fromhex(body[0])
            except ValueError:
                raise ByValueError("unreadable bytes") from None
        if tag == "dtype" and len(body) == 1:
            return _dtype(body[0])
        if tag == "X" and len(body) == 1 and type(body[0]) is str:
            return Foreign(body[0])
        raise ByValueError(f"an unknown node {tag!r}")

    def tensor(self, body) -> torch.Tensor:
        if len(body) != 4 or type(body[1]) is not list or not all(type(v) is int and v >= 0 for v in
                                                                  [*body[1], body[2], body[3]]):
            raise ByValueError("a malformed tensor")
        dtype, shape, offset, nbytes = _dtype(body[0]), body[1], body[2], body[3]
        numel = 1
        for s in shape:
            numel *= s
        itemsize = torch.empty((), dtype=dtype).element_size()
        if numel * itemsize != nbytes or offset + nbytes > len(self.blob):
            raise ByValueError(f"a tensor whose bytes do not match its shape {shape} and dtype {dtype}")
        raw = torch.frombuffer(bytearray(self.blob[offset:offset + nbytes]), dtype=torch.uint8) \
            if nbytes else torch.empty(0, dtype=torch.uint8)
        return raw.view(dtype).reshape(shape)


def loads(data: bytes) -> Any:
    """The value :func:`dumps` wrote, trusting nothing in the bytes."""
    if len(data) > MAX_BYTES:
        raise ByValueError(f"the answer is {len(data) / 2 ** 20:.0f} MiB; at most {MAX_BYTES // 2 ** 20} MiB are read")
    if data[:len(MAGIC)] != MAGIC or len(data) < len(MAGIC) + 8:
        raise ByValueError("not an answer written by the course's plan runner")
    (n,) = struct.unpack("<Q", data[len(MAGIC):len(MAGIC) + 8])
    start = len(MAGIC) + 8
    if start + n > len(data):
        raise ByValueError("a truncated answer")
    try:
        root = json.loads(data[start:start + n].decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ByValueError(f"an unreadable header ({type(exc).__name__})") from None
    return _Reader(data[start + n:]).node(root)


def decode(header: str, chunks: list[bytes]) -> Any:
    """Inverse of :func:`encode` (for tests)."""
    return _Reader(b"".join(chunks)).node(json.loads(header))


def load(path) -> Any:
    """Read what :func:`save` wrote, trusting nothing in it (judge side)."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    return loads(data)


def roundtrip(value: Any) -> Any:
    """``value`` as the judge would receive it. Self-checks in a learner's notebook pass values
    through this, so they judge exactly what the grader judges."""
    return loads(dumps(value))
