"""Everything the counter knows about aten ops: the registered formulas and
the explicit list of ops that do no arithmetic.

An op the counter meets that is in neither :data:`FORMULAS` nor
:data:`KNOWN_ZERO` (nor torch's own flop registry) is reported in
``OpCount.uncounted`` rather than silently taken as free.

FlopCounterMode decomposes an op that has a CompositeImplicitAutograd kernel
(e.g. ``silu_backward``, ``where``, ``max.other``) before counting, so such
ops are counted through their parts (with the same total, by construction of
the formulas); their formulas here apply where they arrive whole.
"""

from __future__ import annotations

from typing import Any

import torch

from aihpc.counting import formulas_basic, formulas_nn, formulas_norm
from aihpc.counting.formula_table import Formula, aten_packets


def _merge(*tables: dict[Any, Formula]) -> dict[Any, Formula]:
    merged: dict[Any, Formula] = {}
    for table in tables:
        for packet, formula in table.items():
            if packet in merged:
                raise RuntimeError(f"duplicate counting formula for {packet}")
            merged[packet] = formula
    return merged


#: aten op packet -> :class:`Formula`, for every op that does arithmetic.
FORMULAS: dict[Any, Formula] = _merge(
    formulas_basic.TABLE.entries, formulas_nn.TABLE.entries, formulas_norm.TABLE.entries
)

_ZERO_NAMES = [
    # views and shape changes
    "view",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "as_strided",
    "as_strided_",
    "expand",
    "expand_as",
    "permute",
    "transpose",
    "transpose_",
    "t",
    "t_",
    "squeeze",
    "squeeze_",
    "unsqueeze",
    "unsqueeze_",
    "flatten",
    "unflatten",
    "slice",
    "select",
    "narrow",
    "split",
    "split_with_sizes",
    "unsafe_split",
    "unsafe_split_with_sizes",
    "chunk",
    "unsafe_chunk",
    "unbind",
    "diagonal",
    "unfold",
    "alias",
    "view_as_real",
    "view_as_complex",
    "movedim",
    "view_copy",
    "expand_copy",
    "permute_copy",
    "transpose_copy",
    "t_copy",
    "squeeze_copy",
    "unsqueeze_copy",
    # backward of views/selections: write the gradient into a zero tensor
    "select_backward",
    "slice_backward",
    "diagonal_backward",
    # copies and data movement
    "cat",
    "stack",
    "clone",
    "copy_",
    "_to_copy",
    "to",
    "contiguous",
    "detach",
    "detach_",
    "lift_fresh",
    "lift_fresh_copy",
    "repeat",
    "roll",
    "flip",
    "index",
    "_unsafe_index",
    "index_select",
    "gather",
    "embedding",
    "constant_pad_nd",
    "slice_scatter",
    "select_scatter",
    "pixel_shuffle",
    "pixel_unshuffle",
    "upsample_nearest1d",
    "upsample_nearest2d",
    "upsample_nearest3d",
    "_upsample_nearest_exact1d",
    "_upsample_nearest_exact2d",
    "_upsample_nearest_exact3d",
    "channel_shuffle",
    # allocation, constants, index-pattern masks, random numbers
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "new_zeros",
    "new_ones",
    "new_full",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "fill_",
    "fill",
    "zero_",
    "scalar_tensor",
    "arange",
    "linspace",
    "tril",
    "triu",
    "tril_",
    "triu_",
    "normal_",
    "uniform_",
    "random_",
    "resize_",
    "set_",
    # metadata queries
    "size",
    "sym_size",
    "stride",
    "sym_stride",
    "storage_offset",
    "sym_storage_offset",
    "numel",
    "sym_numel",
    "dim",
    "is_contiguous",
    "sym_is_contiguous",
    "is_strides_like_format",
    "is_non_overlapping_and_dense",
    "is_same_size",
    "_has_compatible_shallow_copy_type",
    "_local_scalar_dense",
    "_assert_tensor_metadata",
]


def _known_zero() -> frozenset[Any]:
    packets = set(aten_packets(*_ZERO_NAMES))
    for name in ("layout", "device"):
        try:
            packets.add(getattr(torch.ops.prim, name))
        except (AttributeError, RuntimeError):
            continue
    return frozenset(packets)


#: aten op packets that do no arithmetic (views, copies, allocation, metadata).
KNOWN_ZERO: frozenset[Any] = _known_zero()

if KNOWN_ZERO & FORMULAS.keys():  # pragma: no cover - a programming error
    raise RuntimeError(f"ops both counted and known-zero: {KNOWN_ZERO & FORMULAS.keys()}")


def op_name(packet: Any) -> str:
    """Short name of an op packet: ``torch.ops.aten.add`` -> ``"add"``."""
    name = str(packet)
    return name[5:] if name.startswith("aten.") else name


def family(packet: Any) -> str:
    """The op type a packet is reported under in ``OpCount.by_operator``."""
    formula = FORMULAS.get(packet)
    return formula.family if formula is not None else op_name(packet)


#: Families whose forward MACs make up ``OpCount.conv_linear_macs``.
MAC_PACKETS: frozenset[Any] = frozenset(p for p, f in FORMULAS.items() if f.macs is not None)
