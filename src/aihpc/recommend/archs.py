"""The built-in candidate architectures, as :class:`~aihpc.tasks.image.spec.ArchSpec` templates.

Every template is a plain CNN: conv[-bn]-relu blocks, optional 2x2 max
pools (only while the feature map is at least 4 pixels wide), optional
residual adds between equal-shaped blocks, global average pooling and a
dense classifier, sized to the task's input ``(C, H, W)`` and classes.

* :func:`wide_range_specs` -- the ``small`` set: 10 networks from ~100 to
  ~100,000 parameters (at 1x8x8, 10 classes), so size differs widely.
* :func:`matched_specs` -- the ``matched`` set: 10 different shapes (depth,
  kernel, pooling, BN, skips), each widened until it has about
  ``target`` parameters, so "bigger is better" cannot rank them.
"""

from __future__ import annotations

from dataclasses import dataclass

from aihpc.tasks.image.layer import INPUT, Layer
from aihpc.tasks.image.spec import ArchSpec


@dataclass(frozen=True)
class Template:
    """A plain CNN: ``depth`` blocks of ``width`` (times ``growth`` after each pool) channels."""

    name: str
    depth: int
    kernel: int = 3
    pools: tuple[int, ...] = ()  # pool after these blocks (0-based)
    bn: bool = True
    skips: bool = False
    growth: int = 2

    def spec(self, input_shape: tuple[int, int, int], num_classes: int, width: int) -> ArchSpec:
        layers: list[Layer] = []
        src, channels, side = INPUT, input_shape[0], min(input_shape[1], input_shape[2])
        for i in range(self.depth):
            out = width
            block_in = src
            layers.append(
                Layer(
                    name=f"conv{i}",
                    type="conv",
                    inputs=(src,),
                    out_channels=out,
                    kernel_size=self.kernel,
                    padding=self.kernel // 2,
                    bias=not self.bn,
                )
            )
            src = f"conv{i}"
            if self.bn:
                layers.append(Layer(name=f"bn{i}", type="bn", inputs=(src,)))
                src = f"bn{i}"
            if self.skips and channels == out and block_in != INPUT:
                layers.append(Layer(name=f"add{i}", type="add", inputs=(src, block_in)))
                src = f"add{i}"
            layers.append(Layer(name=f"relu{i}", type="relu", inputs=(src,)))
            src, channels = f"relu{i}", out
            if i in self.pools and side >= 4:
                layers.append(Layer(name=f"pool{i}", type="maxpool", inputs=(src,), kernel_size=2))
                src, side, width = f"pool{i}", side // 2, width * self.growth
        layers.append(Layer(name="gap", type="global_avgpool", inputs=(src,)))
        layers.append(Layer(name="fc", type="dense", inputs=("gap",), out_features=num_classes))
        return ArchSpec(
            input_shape=input_shape,  # ArchSpec makes it a tuple
            num_classes=num_classes,
            layers=tuple(layers),
            output="fc",
        )


#: The ``small`` set: (template, width) of widely differing size.
WIDE_RANGE: tuple[tuple[Template, int], ...] = (
    (Template("c1w4", 1), 4),
    (Template("c1w16", 1), 16),
    (Template("c2w8", 2), 8),
    (Template("c2w16", 2), 16),
    (Template("c2w32p", 2, pools=(0,)), 32),
    (Template("c3w16p", 3, pools=(1,)), 16),
    (Template("c3w32p", 3, pools=(1,)), 32),
    (Template("c4w24p", 4, pools=(1,)), 24),
    (Template("c4w32p", 4, pools=(1,)), 32),
    (Template("c4w48p", 4, pools=(1,)), 48),
)

#: The ``matched`` set: shapes that differ, widened to about the same size.
MATCHED: tuple[Template, ...] = (
    Template("m_shallow", 1),
    Template("m_two", 2),
    Template("m_1x1", 3, kernel=1),
    Template("m_k5", 2, kernel=5),
    Template("m_pool_early", 3, pools=(0,), growth=1),
    Template("m_pool_late", 3, pools=(2,), growth=1),
    Template("m_nobn", 3, pools=(1,), bn=False),
    Template("m_deep", 6, pools=(2,), growth=1),
    Template("m_skip", 5, pools=(), skips=True),
    Template("m_twopool", 4, pools=(0, 2), growth=1),
)


def wide_range_specs(
    input_shape: tuple[int, int, int], num_classes: int
) -> list[tuple[str, ArchSpec]]:
    """The ``small`` set at this input and class count."""
    return [(t.name, t.spec(input_shape, num_classes, w)) for t, w in WIDE_RANGE]


def matched_specs(
    input_shape: tuple[int, int, int], num_classes: int, target: int = 12_000
) -> list[tuple[str, ArchSpec]]:
    """The ``matched`` set: each template at the width whose parameter count is nearest
    ``target``."""
    out = []
    for t in MATCHED:
        best = _nearest_width(t, input_shape, num_classes, target)
        out.append((t.name, t.spec(input_shape, num_classes, best)))
    return out


def _nearest_width(
    template: Template, input_shape: tuple[int, int, int], num_classes: int, target: int
) -> int:
    """The width at which ``template``'s parameter count is nearest ``target``."""

    def size(w: int) -> int:
        return template.spec(input_shape, num_classes, w).num_params()

    lo, hi = 1, 1024  # parameters grow with width: bisect for the first width >= target
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if size(mid) < target else (lo, mid)
    return min((max(1, lo - 1), lo), key=lambda w: abs(size(w) - target))
