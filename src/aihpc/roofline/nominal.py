"""The nominal peak of a device: what its silicon can do, from the hardware's own figures.

The share of the nominal peak is what language-model papers call model FLOPs
utilisation; aihpc records it beside the share of the measured peak
(:mod:`aihpc.roofline.peak`).  Each answer is a :class:`NominalPeak` (defined in
:mod:`aihpc.scoring.peak`, whose records hold it): ``flops_per_s`` is None exactly
where the peak is not known and ``note`` then says why; where it is known,
``derivation`` shows the product it comes from and ``note`` any caveat (a hidden
boost clock, an assumed FMA unit count).

* :func:`cpu_nominal_peak`: cores x vector lanes of the dtype x FMA units per core x
  2 FLOP x clock, e.g. "2 cores x 16 float32 lanes (AVX-512) x 2 FMA units x 2 FLOP x
  2.30 GHz = 294 GFLOP/s".  Lanes come from the widest vector extension (AVX-512 512
  bits, AVX2/FMA 256, NEON 128, SVE its vector length) and the width of the FMA units,
  the units from :data:`_MICROARCHITECTURES` (vendor, family, model).  The clock is
  cpufreq's maximum where known, else the base clock, with the processor's
  ``clock_source`` in the note.  float64 has half float32's lanes; bfloat16 and float16
  twice them where the processor has instructions for them (AVX512_BF16, AVX512_FP16,
  ARM BF16 and half-precision NEON), 1024 FLOP per cycle and core on Intel's AMX, and
  float32's rate at best without them (said in the note:
  :func:`aihpc.machine.processor.emulation`).
* :func:`gpu_nominal_peak`: the vendor's dense (not 2:4 sparse) figure for the GPU's
  name, from :data:`_GPU_ROWS`; a GPU or dtype missing there is unknown, with the way to
  add it.
* :func:`nominal_peak`: the peak of one worker's device, as the peak search records it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from aihpc.base.checks import integer
from aihpc.base.errors import ConfigError
from aihpc.base.fmt import format_si
from aihpc.machine.processor import (
    HALF_PRECISION_ARITHMETIC,
    Processor,
    describe_processor,
    emulation,
)
from aihpc.scoring.peak import NominalPeak

__all__ = ["NominalPeak", "cpu_nominal_peak", "gpu_nominal_peak", "nominal_peak", "worker_cores"]

CPU_DTYPES = ("float64", "float32", "bfloat16", "float16")
"""The dtypes a CPU's nominal peak is derived for."""

AMX_FLOP_PER_CYCLE = 1024
"""bfloat16 (and AMX-FP16 float16) FLOP per cycle and core of Intel's AMX tile unit (TMUL):
Intel's figure for 4th Gen Xeon Scalable, "1024 BF16 operations per cycle" against 64
float32 FLOP per cycle with AVX-512 FMA (an operation of a multiply-add counted as 2)."""


@dataclass(frozen=True)
class Microarchitecture:
    """A core's FMA units: how many, each how wide in bits, and a caveat."""

    name: str
    fma_units: int
    unit_bits: int
    note: str | None = None


def _intel(
    models: dict[int, str], units: int, bits: int, note: str | None = None
) -> dict[tuple[str, int | None, int], Microarchitecture]:
    return {
        ("GenuineIntel", 6, m): Microarchitecture(n, units, bits, note) for m, n in models.items()
    }


_HYBRID = "a hybrid processor: the P-cores' figure (its E-cores have 2 x 128-bit FMA units)"
_SILVER = (
    "Xeon Bronze, Silver and some Gold 5xxx SKUs have one 512-bit FMA unit per core: half this"
)
_FUSED = "AVX-512 runs on one 512-bit unit made of the two 256-bit ones: the same FLOP per cycle"

_MICROARCHITECTURES: dict[tuple[str, int | None, int], Microarchitecture] = {
    # Intel family 6, by model (Intel's optimization reference manual; the SDM's model list)
    **_intel({85: "Skylake-SP / Cascade Lake / Cooper Lake"}, 2, 512, _SILVER),
    **_intel(
        {
            87: "Knights Landing",
            133: "Knights Mill",
            106: "Ice Lake-SP",
            108: "Ice Lake-D",
            143: "Sapphire Rapids",
            207: "Emerald Rapids",
            173: "Granite Rapids",
            174: "Granite Rapids-D",
        },
        2,
        512,
    ),
    **_intel(
        {125: "Ice Lake", 126: "Ice Lake", 140: "Tiger Lake", 141: "Tiger Lake"}, 2, 256, _FUSED
    ),
    **_intel({167: "Rocket Lake"}, 2, 256, _FUSED),
    **_intel(
        {
            60: "Haswell",
            63: "Haswell-EP",
            69: "Haswell",
            70: "Haswell",
            61: "Broadwell",
            71: "Broadwell",
            79: "Broadwell-EP",
            86: "Broadwell-DE",
            78: "Skylake",
            94: "Skylake",
            142: "Kaby / Coffee / Whiskey Lake",
            158: "Kaby / Coffee Lake",
            165: "Comet Lake",
            166: "Comet Lake",
        },
        2,
        256,
    ),
    **_intel(
        {
            151: "Alder Lake",
            154: "Alder Lake",
            183: "Raptor Lake",
            186: "Raptor Lake",
            191: "Raptor Lake",
            170: "Meteor Lake",
            172: "Meteor Lake",
            197: "Arrow Lake",
            198: "Arrow Lake",
            189: "Lunar Lake",
        },
        2,
        256,
        _HYBRID,
    ),
    **_intel({175: "Sierra Forest", 190: "Alder Lake-N"}, 2, 128),
    # ARM, by "CPU part" (Arm's Neoverse software optimization guides; Fujitsu's A64FX manual)
    ("ARM", None, 0xD0C): Microarchitecture("Neoverse N1", 2, 128),
    ("ARM", None, 0xD40): Microarchitecture("Neoverse V1", 2, 256),
    ("ARM", None, 0xD49): Microarchitecture("Neoverse N2", 2, 128),
    ("ARM", None, 0xD4F): Microarchitecture("Neoverse V2", 4, 128),
    ("Fujitsu", None, 0x001): Microarchitecture("A64FX", 2, 512),
}
"""(vendor, family or None on ARM, model) -> the core's FMA units.  AMD's cores are told
apart by family (and model) in :func:`microarchitecture`."""


def microarchitecture(processor: Processor) -> Microarchitecture | None:
    """The FMA units of ``processor``'s cores; None where its microarchitecture is not known."""
    vendor, family, model = processor.vendor, processor.family, processor.model
    if vendor in ("AuthenticAMD", "HygonGenuine") and family is not None and model is not None:
        return _amd(family, model, "avx512f" in processor.extensions)
    if vendor is None or model is None:
        return None
    by_part = _MICROARCHITECTURES.get((vendor, None, model))  # ARM: vendor and CPU part
    return by_part or _MICROARCHITECTURES.get((vendor, family, model))


def _amd(family: int, model: int, avx512: bool) -> Microarchitecture | None:
    """AMD's Zen cores by family (AMD's software optimization guides for each)."""
    if (family == 0x17 and model < 0x30) or family == 0x18:  # Zen, Zen+; Hygon Dhyana
        return Microarchitecture("Zen / Zen+", 2, 128, "AVX2 runs as two 128-bit halves")
    if family == 0x17:
        return Microarchitecture("Zen 2", 2, 256)
    if family == 0x19 and avx512:
        return Microarchitecture("Zen 4", 2, 256, "AVX-512 runs as two 256-bit halves")
    if family == 0x19:
        return Microarchitecture("Zen 3", 2, 256)
    if family == 0x1A:  # EPYC 9005 (models 0x00-0x1f) and Ryzen 9000 (0x40-0x4f): full width
        full = model < 0x20 or 0x40 <= model < 0x50
        note = None if full else "mobile Zen 5 cores run AVX-512 as two 256-bit halves: half this"
        return Microarchitecture("Zen 5", 2, 512, note)
    return None


def vector_width(processor: Processor) -> tuple[int, str, str | None] | None:
    """(bits, name, caveat) of the widest FMA vector extension; None where there is none."""
    extensions = set(processor.extensions)
    if "avx512f" in extensions:
        return 512, "AVX-512", None
    if extensions & {"avx2", "fma"}:
        return 256, "AVX2", None
    if "sve" in extensions:
        if processor.sve_vector_bits:
            return processor.sve_vector_bits, f"SVE {processor.sve_vector_bits}-bit", None
        return 128, "SVE", "SVE's vector length is not known: 128 bits assumed"
    if "neon" in extensions:
        return 128, "NEON", None
    return None


def worker_cores(processor: Processor, threads: int | None) -> float | None:
    """A worker's share of the physical cores: C x min(T, L) / L for T torch threads on a host
    of L logical CPUs and C physical cores (all cores where ``threads`` is None or L unknown)."""
    cores, logical = processor.cores, processor.logical_cpus
    if threads is None or cores is None:
        return None
    if threads < 1:
        raise ConfigError(f"threads must be >= 1, got {threads}")
    if logical is None:
        return float(min(threads, cores))
    return cores * min(threads, logical) / logical


def cpu_nominal_peak(processor: Processor, dtype: str, cores: float | None = None) -> NominalPeak:
    """The nominal peak of ``cores`` cores (default: all physical cores) of ``processor`` in
    ``dtype`` (the module docstring's product); unknown, with the reason, where a factor is."""
    if dtype not in CPU_DTYPES:
        return NominalPeak.unknown(
            dtype, f"a CPU's nominal peak is derived for {list(CPU_DTYPES)}, not {dtype!r}"
        )
    if cores is None:
        cores = processor.cores
    if cores is None:
        return NominalPeak.unknown(dtype, "the number of physical cores is not known")
    if not cores > 0:
        raise ConfigError(f"cores must be > 0, got {cores}")
    width = vector_width(processor)
    if width is None:
        return NominalPeak.unknown(
            dtype,
            f"no FMA vector extension (AVX-512, AVX2, FMA, SVE, NEON) among "
            f"{list(processor.extensions)}",
        )
    mhz = processor.max_clock_mhz or processor.clock_mhz
    if mhz is None:
        return NominalPeak.unknown(dtype, "the processor's clock is not known")
    arch, notes = _units(processor, width)
    per_core, what, caveat = _per_cycle(processor, dtype, width, arch)
    flops = cores * per_core * mhz * 1e6
    count = f"{cores:g} core" + ("" if cores == 1 else "s")
    derivation = f"{count} x {what} x {mhz / 1000:.2f} GHz = {format_si(flops, 'FLOP/s')}"
    caveats = [
        caveat,
        *notes,
        f"clock: {processor.clock_source}" if processor.clock_source else None,
    ]
    note = "; ".join(c for c in caveats if c) or None
    return NominalPeak(dtype=dtype, flops_per_s=flops, derivation=derivation, note=note)


def _units(
    processor: Processor, width: tuple[int, str, str | None]
) -> tuple[Microarchitecture, list[str | None]]:
    """The cores' FMA units (2 of the vector width assumed where the microarchitecture is not
    known) and the caveats that go with them."""
    bits, _, width_note = width
    arch = microarchitecture(processor)
    if arch is None:
        what = f"{processor.vendor} family {processor.family} model {processor.model}"
        assumed = (
            f"microarchitecture not in aihpc's table ({what}): 2 FMA units of {bits} bits assumed"
        )
        return Microarchitecture("unknown", 2, bits), [width_note, assumed]
    return arch, [width_note, arch.note]


def _per_cycle(
    processor: Processor, dtype: str, width: tuple[int, str, str | None], arch: Microarchitecture
) -> tuple[float, str, str | None]:
    """(FLOP per cycle and core, its product in words, a caveat) in ``dtype``."""
    bits, name, _ = width
    lanes32 = min(bits, arch.unit_bits) // 32
    extensions = set(processor.extensions)

    def fma(lanes: int, of: str, label: str) -> tuple[float, str]:
        product = lanes * arch.fma_units * 2
        return product, f"{lanes} {of} lanes ({label}) x {arch.fma_units} FMA units x 2 FLOP"

    if dtype == "float64":
        return (*fma(lanes32 // 2, "float64", name), None)
    if dtype == "bfloat16" and "amx_bf16" in extensions:
        return AMX_FLOP_PER_CYCLE, f"{AMX_FLOP_PER_CYCLE} bfloat16 FLOP per cycle (AMX)", None
    if dtype == "float16" and "amx_fp16" in extensions:
        return AMX_FLOP_PER_CYCLE, f"{AMX_FLOP_PER_CYCLE} float16 FLOP per cycle (AMX-FP16)", None
    if dtype in HALF_PRECISION_ARITHMETIC:
        why = emulation(processor, dtype)
        if why is not None:
            return (
                *fma(lanes32, "float32", name),
                f"{why}; this figure is float32's rate, at best",
            )
        vector = [e for e in HALF_PRECISION_ARITHMETIC[dtype] if e in extensions]
        return (*fma(2 * lanes32, dtype, f"{name}, {vector[0].upper()}"), None)
    return (*fma(lanes32, "float32", name), None)


# -- GPUs -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuPeaks:
    """A GPU's dense peaks per dtype in FLOP/s, from ``source``; ``missing`` says why a dtype
    has none (else: not entered); ``note`` is a caveat for every dtype."""

    label: str
    source: str
    flops: Mapping[str, float]
    missing: Mapping[str, str] = field(default_factory=dict)
    note: str | None = None


_VOLTA = {"bfloat16": "Volta has no bfloat16 arithmetic", "tf32": "Volta has no TF32"}
_TURING = {"bfloat16": "Turing has no bfloat16 arithmetic", "tf32": "Turing has no TF32"}

# Per GPU: the pattern on its name, its label, the data sheet, then TFLOP/s in float64, float32,
# tf32, bfloat16, float16 (None: not entered).  float64 is the FP64 tensor-core (matrix) figure
# where the GPU has one, as dense matmuls use it; float32 is FP32 without tensor cores; tf32,
# bfloat16 and float16 are dense tensor-core figures, half the data sheets' "with sparsity" (*)
# ones.  The first pattern that matches wins: specific names come first.
_GPU_ROWS: tuple[
    tuple[str, str, str, float | None, float | None, float | None, float | None, float | None], ...
] = (
    # GH200: FP64 TC 67, FP32 67, TF32 494, BF16 990, FP16 990 (dense, as the sheet prints them)
    (r"GH200", "NVIDIA GH200", "NVIDIA GH200 data sheet", 67, 67, 494, 990, 990),
    # H200 NVL: FP64 TC 60, FP32 60, TF32 835*, BF16 1,671*, FP16 1,671*
    (r"H200 NVL", "NVIDIA H200 NVL", "NVIDIA H200 data sheet", 60, 60, 417.5, 835.5, 835.5),
    # H200 SXM: FP64 TC 67, FP32 67, TF32 989*, BF16 1,979*, FP16 1,979*
    (r"H200", "NVIDIA H200 SXM", "NVIDIA H200 data sheet", 67, 67, 494.5, 989.5, 989.5),
    # H100 NVL, per GPU: FP64 TC 60, FP32 60, TF32 835*, BF16 1,671*, FP16 1,671*
    (r"H100 NVL", "NVIDIA H100 NVL", "NVIDIA H100 data sheet", 60, 60, 417.5, 835.5, 835.5),
    # H100 PCIe: FP64 TC 51, FP32 51, TF32 756*, BF16 1,513*, FP16 1,513*
    (r"H100 PCIe", "NVIDIA H100 PCIe", "NVIDIA H100 data sheet", 51, 51, 378, 756.5, 756.5),
    # H100 SXM ("NVIDIA H100 80GB HBM3"): FP64 TC 67, FP32 67, TF32 989*, BF16 1,979*, FP16 1,979*
    (r"H100", "NVIDIA H100 SXM", "NVIDIA H100 data sheet", 67, 67, 494.5, 989.5, 989.5),
    # A100 (SXM4, PCIe; 40 and 80 GB alike): FP64 TC 19.5, FP32 19.5, TF32 156, BF16/FP16 312
    (r"A100", "NVIDIA A100", "NVIDIA A100 data sheet", 19.5, 19.5, 156, 312, 312),
    # A30: FP64 TC 10.3, FP32 10.3, TF32 82, BF16 165, FP16 165
    (r"\bA30\b", "NVIDIA A30", "NVIDIA A30 data sheet", 10.3, 10.3, 82, 165, 165),
    # A10: FP32 31.2, TF32 62.5, BF16 125, FP16 125 (no FP64 figure)
    (r"\bA10\b", "NVIDIA A10", "NVIDIA A10 data sheet", None, 31.2, 62.5, 125, 125),
    # L40S: FP32 91.6, TF32 183, BF16 362.05, FP16 362.05 (no FP64 figure)
    (r"L40S", "NVIDIA L40S", "NVIDIA L40S data sheet", None, 91.6, 183, 362.05, 362.05),
    # L40: FP32 90.5, TF32 90.5, BF16 181.05, FP16 181.05 (no FP64 figure)
    (r"\bL40\b", "NVIDIA L40", "NVIDIA L40 data sheet", None, 90.5, 90.5, 181.05, 181.05),
    # L4: FP32 30.3, TF32 120*, BF16 242*, FP16 242* (no FP64 figure)
    (r"\bL4\b", "NVIDIA L4", "NVIDIA L4 data sheet", None, 30.3, 60, 121, 121),
    # V100S PCIe: FP64 8.2, FP32 16.4, tensor (FP16) 130
    (r"V100S", "NVIDIA V100S PCIe", "NVIDIA V100 data sheet", 8.2, 16.4, None, None, 130),
    # V100 SXM2: FP64 7.8, FP32 15.7, tensor (FP16) 125
    (r"V100-SXM2", "NVIDIA V100 SXM2", "NVIDIA V100 data sheet", 7.8, 15.7, None, None, 125),
    # V100 PCIe: FP64 7, FP32 14, tensor (FP16) 112
    (r"V100-PCIE", "NVIDIA V100 PCIe", "NVIDIA V100 data sheet", 7, 14, None, None, 112),
    # T4: FP32 8.1, FP16 tensor 65 (no FP64 figure)
    (r"\bT4\b", "NVIDIA T4", "NVIDIA T4 data sheet", None, 8.1, None, None, 65),
    # HGX B200, per GPU: TF32 2.2 P*, BF16 4.5 P*, FP16 4.5 P*
    (r"\bB200\b", "NVIDIA B200", "NVIDIA HGX B200 data sheet", None, None, 1100, 2250, 2250),
    # MI300X (MI325X alike): FP64 matrix 163.4, FP32 163.4, TF32 653.7, BF16 1307.4, FP16 1307.4
    (
        r"MI300X|MI325X",
        "AMD Instinct MI300X",
        "AMD Instinct MI300X data sheet",
        163.4,
        163.4,
        653.7,
        1307.4,
        1307.4,
    ),
)

_GPU_MISSING: dict[str, dict[str, str]] = {
    "NVIDIA V100S PCIe": _VOLTA,
    "NVIDIA V100 SXM2": _VOLTA,
    "NVIDIA V100 PCIe": _VOLTA,
    "NVIDIA T4": _TURING,
    "NVIDIA B200": {
        "float32": "the data sheet's FP32 figure changed between revisions (80, then 75 TFLOP/s)",
        "float64": "the data sheet's FP64 figure changed between revisions (40, then 37 TFLOP/s)",
    },
}
"""Why a GPU of the table has no figure for a dtype (else: not entered)."""

_GPU_NOTES = {
    "AMD Instinct MI300X": "the whole GPU (SPX mode); a partitioned GPU's parts are devices each",
}
"""A caveat for each of a GPU's figures."""

GPU_DTYPES = ("float64", "float32", "tf32", "bfloat16", "float16")
"""The dtypes of a GPU's nominal peak, in the order of the table's columns."""


_UNITS = {
    "float64": "FP64 (matrix units where the GPU has them)",
    "float32": "FP32 (vector units, no tensor cores)",
    "tf32": "dense on tensor cores",
    "bfloat16": "dense on tensor cores",
    "float16": "dense on tensor cores",
}
"""What each dtype's figure counts, in a derivation."""


def _gpu_table() -> tuple[tuple[str, GpuPeaks], ...]:
    """(pattern, peaks in FLOP/s) of each row of :data:`_GPU_ROWS`."""
    table = []
    for pattern, label, source, *tflops in _GPU_ROWS:
        rates = {d: t * 1e12 for d, t in zip(GPU_DTYPES, tflops, strict=True) if t is not None}
        missing = _GPU_MISSING.get(label, {})
        table.append((pattern, GpuPeaks(label, source, rates, missing, _GPU_NOTES.get(label))))
    return tuple(table)


_GPUS = _gpu_table()
"""Regular expressions (case-insensitive) on ``torch.cuda.get_device_name()`` -> the GPU's
dense peaks."""


def gpu_nominal_peak(name: str, dtype: str, count: int = 1) -> NominalPeak:
    """The vendor's dense peak of ``count`` GPUs named ``name`` (``torch.cuda.get_device_name``)
    in ``dtype``; unknown, with the way to add it, where the GPU or dtype is not in the table."""
    integer("count", count)
    if dtype not in GPU_DTYPES:
        return NominalPeak.unknown(
            dtype, f"a GPU's nominal peak is known for {list(GPU_DTYPES)}, not {dtype!r}"
        )
    entry = next((g for pattern, g in _GPUS if re.search(pattern, name, re.IGNORECASE)), None)
    if entry is None:
        return NominalPeak.unknown(
            dtype,
            f"GPU {name!r} is not in aihpc's table of nominal peaks: add its data-sheet figures "
            "(dense, per dtype) to _GPU_ROWS in aihpc/roofline/nominal.py",
        )
    rate = entry.flops.get(dtype)
    if rate is None:
        why = entry.missing.get(dtype) or (
            f"no {dtype} figure in aihpc's table: add it from the {entry.source} to _GPU_ROWS in "
            "aihpc/roofline/nominal.py"
        )
        return NominalPeak.unknown(dtype, f"{entry.label}: {why}")
    each = f"{format_si(rate, 'FLOP/s')} {dtype} {_UNITS[dtype]} ({entry.label}, {entry.source})"
    derivation = each if count == 1 else f"{count} x {each} = {format_si(count * rate, 'FLOP/s')}"
    return NominalPeak(
        dtype=dtype, flops_per_s=count * rate, derivation=derivation, note=entry.note
    )


def nominal_peak(
    device: str, dtype: str, threads: int | None = None, processor: Processor | None = None
) -> NominalPeak:
    """The nominal peak of one process's ``device`` ("cpu", "cuda", "cuda:N") in ``dtype``.

    On the CPU, the share of the cores ``threads`` torch threads have (:func:`worker_cores`;
    all cores where None) of ``processor`` (default :func:`describe_processor`); on a GPU, its
    name's figure.
    """
    kind, _, index = str(device).partition(":")
    if kind == "cpu":
        processor = processor or describe_processor()
        return cpu_nominal_peak(processor, dtype, worker_cores(processor, threads))
    if kind == "cuda":
        import torch

        gpu = int(index) if index else torch.cuda.current_device()
        return gpu_nominal_peak(torch.cuda.get_device_name(gpu), dtype)
    return NominalPeak.unknown(dtype, f"no nominal peak for device {device!r} (cpu or cuda only)")
