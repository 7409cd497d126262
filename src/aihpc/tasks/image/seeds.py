"""Seed architectures: ResNet-style starting points for the search.

Three sizes, picked from the input by ``size="auto"``:

* ``"tiny"`` (min(H, W) < 16, e.g. 1x8x8 digits): a 3x3 stem without pooling,
  then two stages of basic residual blocks (``width`` and ``2*width``
  channels, default 16/32, ``blocks`` = 2 per stage), the second stage with
  stride 2; global average pooling and a dense classifier.
* ``"cifar"`` (16 <= min(H, W) < 96): ResNet-20 of He et al. (2016, sec. 4.2):
  3x3 stem, three stages of ``blocks`` (default 3) basic blocks with
  ``width``, 2x, 4x channels (default 16/32/64); projection (1x1 conv + BN)
  shortcuts where the shape changes.
* ``"resnet50"`` (otherwise, e.g. 3x224x224): exactly torchvision's
  ResNet-50 (v1.5 bottlenecks, stride in the 3x3 conv): 25,557,032
  parameters at 1000 classes.  ``width`` and ``blocks`` do not apply.

Layer names follow torchvision with ``_`` for ``.``: ``conv1``, ``bn1``,
``relu1``, ``maxpool``, ``layer2_0_conv2``, ``layer2_0_downsample_conv``,
``layer2_0_add``, ``layer2_0_relu`` (block output), ``avgpool``, ``fc``.
"""

from __future__ import annotations

from aihpc.base.checks import integer
from aihpc.base.errors import SpecError
from aihpc.tasks.image.layer import INPUT, Layer
from aihpc.tasks.image.spec import ArchSpec

SIZES = ("auto", "tiny", "cifar", "resnet50")


def _conv(name: str, src: str, out: int, k: int, stride: int = 1) -> Layer:
    return Layer(
        name,
        "conv",
        (src,),
        out_channels=out,
        kernel_size=k,
        stride=stride,
        padding=k // 2,
        bias=False,
    )


def _conv_bn(
    layers: list[Layer],
    prefix: str,
    src: str,
    out: int,
    k: int,
    stride: int = 1,
    index: str = "",
    relu: bool = True,
) -> str:
    """Append conv-bn(-relu) named ``<prefix>conv<index>`` etc.; return the last name."""
    layers.append(_conv(f"{prefix}conv{index}", src, out, k, stride))
    layers.append(Layer(f"{prefix}bn{index}", "bn", (f"{prefix}conv{index}",)))
    if not relu:
        return f"{prefix}bn{index}"
    layers.append(Layer(f"{prefix}relu{index}", "relu", (f"{prefix}bn{index}",)))
    return f"{prefix}relu{index}"


def _block(
    layers: list[Layer],
    prefix: str,
    src: str,
    in_ch: int,
    planes: int,
    stride: int,
    bottleneck: bool,
) -> tuple[str, int]:
    """Append one residual block reading ``src``; return (output name, channels)."""
    if bottleneck:
        out_ch = planes * 4
        x = _conv_bn(layers, prefix, src, planes, 1, index="1")
        x = _conv_bn(layers, prefix, x, planes, 3, stride, index="2")
        x = _conv_bn(layers, prefix, x, out_ch, 1, index="3", relu=False)
    else:
        out_ch = planes
        x = _conv_bn(layers, prefix, src, planes, 3, stride, index="1")
        x = _conv_bn(layers, prefix, x, planes, 3, index="2", relu=False)
    shortcut = src
    if stride != 1 or in_ch != out_ch:
        shortcut = _conv_bn(layers, f"{prefix}downsample_", src, out_ch, 1, stride, relu=False)
    layers.append(Layer(f"{prefix}add", "add", (x, shortcut)))
    layers.append(Layer(f"{prefix}relu", "relu", (f"{prefix}add",)))
    return f"{prefix}relu", out_ch


def _resnet(
    input_shape: tuple[int, int, int],
    num_classes: int,
    planes: list[int],
    blocks: list[int],
    bottleneck: bool,
    imagenet_stem: bool,
) -> ArchSpec:
    layers: list[Layer] = []
    if imagenet_stem:
        x = _conv_bn(layers, "", INPUT, 64, 7, 2, index="1")
        layers.append(Layer("maxpool", "maxpool", (x,), kernel_size=3, stride=2, padding=1))
        x, ch = "maxpool", 64
    else:
        x = _conv_bn(layers, "", INPUT, planes[0], 3, index="1")
        ch = planes[0]
    for stage, (p, n) in enumerate(zip(planes, blocks, strict=True), start=1):
        for j in range(n):
            stride = 2 if (stage > 1 and j == 0) else 1
            x, ch = _block(layers, f"layer{stage}_{j}_", x, ch, p, stride, bottleneck)
    layers.append(Layer("avgpool", "global_avgpool", (x,)))
    # p = 0: the seed computes exactly the reference network; a trial's dropout
    # hyperparameter sets the rate while it trains (aihpc.train.trainer).
    layers.append(Layer("dropout", "dropout", ("avgpool",), p=0.0))
    layers.append(Layer("fc", "dense", ("dropout",), out_features=num_classes))
    return ArchSpec(
        input_shape=input_shape, num_classes=num_classes, layers=tuple(layers), output="fc"
    )


def _checked_shape(
    size: str, input_shape: tuple[int, int, int], num_classes: int
) -> tuple[int, int, int]:
    """``input_shape`` as a tuple, once ``size``, it and ``num_classes`` are checked."""
    if size not in SIZES:
        raise SpecError(f"seed size must be one of {', '.join(SIZES)}, got {size!r}")
    shape = tuple(input_shape)
    if len(shape) != 3:
        raise SpecError(f"input_shape must be (C, H, W), got {input_shape!r}")
    integer("num_classes", num_classes, error=SpecError)
    return shape


def auto_size(input_shape: tuple[int, ...]) -> str:
    """The size ``size="auto"`` picks for ``(C, H, W)`` inputs: by the smaller side, ``tiny``
    under 16, ``cifar`` under 96, else ``resnet50``."""
    side = min(input_shape[1], input_shape[2])
    return "tiny" if side < 16 else "cifar" if side < 96 else "resnet50"


def seed_spec(
    input_shape: tuple[int, int, int],
    num_classes: int,
    size: str = "auto",
    *,
    width: int | None = None,
    blocks: int | None = None,
) -> ArchSpec:
    """A ResNet-style seed for ``(C, H, W)`` inputs and ``num_classes`` classes.

    ``size`` is one of :data:`SIZES`; ``width`` (base channels) and ``blocks``
    (blocks per stage) override the defaults of ``"tiny"`` and ``"cifar"``.
    Raises SpecError for an unknown size, bad overrides or an input too small
    for the chosen size.
    """
    shape = _checked_shape(size, input_shape, num_classes)
    if size == "auto":
        size = auto_size(shape)
    for key, value in (("width", width), ("blocks", blocks)):
        if value is None:
            continue
        if size == "resnet50":
            raise SpecError(f"seed size 'resnet50' is fixed; {key} does not apply, got {value!r}")
        integer(f"seed {key}", value, error=SpecError)
    if size == "resnet50":
        return _resnet(
            shape,
            num_classes,
            [64, 128, 256, 512],
            [3, 4, 6, 3],
            bottleneck=True,
            imagenet_stem=True,
        )
    base = width if width is not None else 16
    if size == "tiny":
        n = blocks if blocks is not None else 2
        return _resnet(
            shape,
            num_classes,
            [base, 2 * base],
            [n, n],
            bottleneck=False,
            imagenet_stem=False,
        )
    n = blocks if blocks is not None else 3
    return _resnet(
        shape,
        num_classes,
        [base, 2 * base, 4 * base],
        [n, n, n],
        bottleneck=False,
        imagenet_stem=False,
    )
