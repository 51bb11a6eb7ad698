"""Block-wise quantized optimizer states: codes, one scale per block, and a map back to floats.

Adam keeps two fp32 numbers per parameter (8 bytes). Quantizing them block-wise (Dettmers et al.
2021, "8-bit Optimizers via Block-wise Quantization", arXiv:2110.02861) stores each as a small code
and each block of ``block_size`` consecutive elements (in memory order) shares one fp32 scale, its
largest magnitude, so one outlier only coarsens its own block::

    blocks  = x.view(-1, block_size)
    scale   = blocks.abs().amax(-1).clip(1e-12)        # one fp32 per block
    codes   = nearest_code(blocks / scale, qmap)        # 8 or 4 bits per element
    x_back  = qmap[codes] * scale

Three kinds, as in torchao.optim 0.18 (``subclass_8bit.py``, ``subclass_4bit.py``, ``subclass_fp8.py``):

========  ==============================================  ==========  ====================
kind      codes                                           block       bytes per element
========  ==============================================  ==========  ====================
``8bit``  uint8 index into the 8-bit dynamic map          256         1 + 4/256
``4bit``  two 4-bit indices packed per uint8; first       128         0.5 + 4/128
          moment: 4-bit dynamic map, second: linear map
``fp8``   float8_e4m3fn values, scale = amax / 448        256         1 + 4/256
========  ==============================================  ==========  ====================

The optimizer dequantizes a state to fp32, updates it in fp32, uses that fp32 value for the weight
update, and stores it back quantized (:meth:`QuantizedState.copy_`).
"""

from __future__ import annotations

import torch

from ..validate import check_bool, check_int
from .qmaps import dynamic_map, linear_map, nearest_code

__all__ = ["KINDS", "BLOCK_SIZES", "QuantizedState", "block_scale"]

KINDS = ("8bit", "4bit", "fp8")
BLOCK_SIZES = {"8bit": 256, "4bit": 128, "fp8": 256}   # torchao.optim 0.18's defaults (adam.py)
FP8 = torch.float8_e4m3fn


def _qmap(kind: str, signed: bool) -> torch.Tensor | None:
    if kind == "8bit":
        return dynamic_map(signed)
    if kind == "4bit":
        return dynamic_map(True, 3, 4) if signed else linear_map(16)
    return None


def block_scale(blocks: torch.Tensor) -> torch.Tensor:
    """Each row's largest magnitude, at least 1e-12 (so an all-zero block divides safely)."""
    return blocks.abs().amax(-1).clip(1e-12)


class QuantizedState:
    """One optimizer state tensor (e.g. Adam's ``exp_avg`` of one weight) stored block-wise.

    ``codes`` (uint8, or float8_e4m3fn for ``fp8``; the 4-bit kind packs two codes per byte in a
    flat tensor), ``scale`` (fp32, one per block) and ``qmap`` (fp32 code book; ``None`` for fp8).
    The state a tensor of ``shape`` would be; :meth:`dequantize` gives it back as fp32.
    """

    def __init__(self, kind: str, shape, *, signed: bool = True, block_size: int | None = None,
                 device=None) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        self.kind, self.signed = kind, check_bool(signed, "signed")
        self.shape = torch.Size(shape)
        self.block_size = check_int(BLOCK_SIZES[kind] if block_size is None else block_size, "block_size", min=2)
        n = self.shape.numel()
        if n % self.block_size:
            raise ValueError(f"{n} elements do not split into blocks of {self.block_size}")
        if kind == "4bit" and self.block_size % 2:
            raise ValueError("4-bit codes are packed two per byte: block_size must be even")
        if kind == "fp8":
            self.codes = torch.zeros(self.shape, dtype=FP8, device=device)
        elif kind == "4bit":
            self.codes = torch.zeros(n // 2, dtype=torch.uint8, device=device)
        else:
            self.codes = torch.zeros(self.shape, dtype=torch.uint8, device=device)
        self.scale = torch.zeros(n // self.block_size, dtype=torch.float32, device=device)
        q = _qmap(kind, signed)
        self.qmap = None if q is None else q.to(device)

    # --- the two directions --------------------------------------------------------------------
    def dequantize(self) -> torch.Tensor:
        """The state as an fp32 tensor of :attr:`shape`: ``qmap[code] * scale`` per block."""
        if self.kind == "fp8":
            vals = self.codes.float().view(-1, self.block_size)
        else:
            codes = self.codes
            if self.kind == "4bit":
                codes = torch.stack([codes >> 4, codes & 0b1111], dim=-1)   # unpack: high nibble first
            vals = self.qmap[codes.int()].view(-1, self.block_size)
        return (vals * self.scale.view(-1, 1)).view(self.shape)

    def copy_(self, x: torch.Tensor) -> "QuantizedState":
        """Store fp32 ``x`` (of :attr:`shape`): new scales, new codes."""
        if not isinstance(x, torch.Tensor) or x.shape != self.shape:
            raise ValueError(f"x must be a tensor of shape {tuple(self.shape)}")
        blocks = x.float().reshape(-1, self.block_size)
        if self.kind == "fp8":
            scale = block_scale(blocks) / torch.finfo(FP8).max
            self.codes.copy_((blocks / scale.view(-1, 1)).to(FP8).view(self.shape))
        else:
            scale = block_scale(blocks)
            codes = nearest_code(blocks / scale.view(-1, 1), self.qmap).view(-1)
            if self.kind == "4bit":
                codes = (codes[::2] << 4) | codes[1::2]                      # pack two per byte
            self.codes.copy_(codes.view(self.codes.shape))
        self.scale.copy_(scale)
        return self

    # --- bookkeeping ---------------------------------------------------------------------------
    def tensors(self) -> list[torch.Tensor]:
        """The tensors this state really holds (codes, scale, and the code book if any)."""
        return [t for t in (self.codes, self.scale, self.qmap) if t is not None]

    @property
    def nbytes(self) -> int:
        """Bytes of :meth:`tensors` (the code book is shared in spirit, but each state holds one,
        as in torchao; it is 1 KiB for 8 bits and 64 B for 4 bits)."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def clone(self) -> "QuantizedState":
        new = object.__new__(QuantizedState)
        new.__dict__.update(self.__dict__)
        new.codes, new.scale = self.codes.clone(), self.scale.clone()
        new.qmap = None if self.qmap is None else self.qmap.clone()
        return new

    def __repr__(self) -> str:
        return (f"QuantizedState({self.kind}, signed={self.signed}, block_size={self.block_size}, "
                f"shape={tuple(self.shape)})")


torch.serialization.add_safe_globals([QuantizedState, torch.Size])   # torch.load(weights_only=True)
