"""The processor that made a result, described closely enough to say why two machines differ.

:func:`describe_processor` reads ``/proc/cpuinfo``, sysfs (``/sys/devices/system/cpu``)
and the build of the torch in this process, and returns a :class:`Processor`: a
frozen record, validated on construction, whose :meth:`Processor.to_dict` is the
JSON-serialisable dict with sorted keys that results files hold (the environment's
``cpu``).  It never raises for a missing file or tool: a field it cannot read is
None (``extensions`` and ``caches`` empty).  :meth:`Processor.from_dict` reads that
dict back; a key an older file lacks reads as None (or empty).  The parsing
functions (:func:`parse_cpuinfo`, :func:`cpu_identity`, :func:`vector_extensions`,
:func:`blas_of`, ...) take text and return values, so tests feed them fixture text.
:func:`emulation` says whether a processor computes a dtype natively, from its extensions: the
rule by which aihpc leaves a dtype out of what it measures by default.

Fields (x86 / ARM where they differ):

``architecture``  str | None, ``platform.machine()``: "x86_64", "aarch64"
``blas``          str | None, torch's BLAS (``torch.__config__.show()``): "mkl 2024.2", "openblas"
``caches``        list of {level, kind "data"/"instruction"/"unified", size_bytes, shared_by:
                  logical CPUs sharing one instance}, the first CPU's (sysfs ``cpu0/cache``)
``clock_mhz``     float | None, MHz: cpuinfo "cpu MHz" of the first CPU, else the model name's
                  "@ 2.30GHz" (the rated base clock)
``clock_source``  str | None, where the nominal peak's clock comes from, with its caveat (a
                  hypervisor guest without cpufreq hides the boost clock)
``cores``         int | None, physical cores of all sockets
``extensions``    list of str, sorted: the vector extensions that decide which kernels run
                  (:data:`X86_EXTENSIONS`, :data:`ARM_EXTENSIONS`), not the whole flags line
``family``        int | None, x86 "cpu family" (6 Intel, 25 Zen 3/4, 26 Zen 5);
                  ARM "CPU architecture" (8)
``hypervisor``    bool | None, x86 flag "hypervisor" (a virtual machine); None on ARM
``logical_cpus``  int | None
``max_clock_mhz`` float | None, MHz: sysfs ``cpu0/cpufreq/cpuinfo_max_freq`` (kHz) / 1000;
                  None without cpufreq (a virtual machine, a container without sysfs)
``model``         int | None, x86 "model" (207 Emerald Rapids); ARM "CPU part" (0xd4f = 3407)
``model_name``    str | None, cpuinfo "model name"; ARM: the core's name from its part, with
                  "rVpR" from "CPU variant" and "CPU revision", e.g. "Neoverse V2 r0p0"
``onednn_isa``    str | None, the ISA oneDNN dispatches to (its verbose "isa:" line) and the
                  kernel of a float32 convolution: "Intel AVX 10.1 (convolution: jit:avx512_core)"
``onednn_version`` str | None, e.g. "3.12.0"
``sockets``       int | None
``stepping``      int | None, x86 "stepping"; ARM "CPU revision"
``sve_vector_bits`` int | None, ARM SVE vector length: 8 x the bytes of
                  ``/proc/sys/abi/sve_default_vector_length``; None without SVE
``threads_per_core`` int | None
``torch_cpu_capability`` str | None, ``torch.backends.cpu.get_cpu_capability()``: "AVX512"...
``vendor``        str | None, "GenuineIntel", "AuthenticAMD"; ARM: the implementer's name
                  ("ARM" for 0x41, "NVIDIA" for 0x4e), else its code ("0x61")

Topology comes from cpuinfo's "physical id" and "core id" (x86), else sysfs
``cpuN/topology`` (ARM), else psutil (cores and logical CPUs only).
"""

from __future__ import annotations

import contextlib
import platform
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from aihpc.base.checks import integer, optional_integer
from aihpc.base.errors import ConfigError, DataError
from aihpc.machine.cpu_libraries import torch_libraries

X86_EXTENSIONS = frozenset(
    "fma f16c avx2 avx512f avx512_bf16 avx512_fp16 avx512_vnni avx_vnni amx_tile amx_bf16 "
    "amx_int8 amx_fp16".split()
)
"""x86 flags recorded in ``extensions``, under their /proc/cpuinfo names (f16c converts float16
to and from float32: it computes nothing in float16)."""

ARM_EXTENSIONS = {f: f for f in ("asimdhp", "bf16", "i8mm", "sme", "sve", "sve2")} | {
    "asimd": "neon"
}
"""ARM "Features" recorded in ``extensions`` (the cpuinfo name -> the name recorded): NEON,
its half-precision arithmetic (asimdhp), BFDOT/BFMMLA (bf16), int8 matmul (i8mm), SVE, SME."""

ARM_IMPLEMENTERS: dict[int, str] = {
    0x41: "ARM",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x46: "Fujitsu",
    0x48: "HiSilicon",
    0x4E: "NVIDIA",
    0x51: "Qualcomm",
    0x61: "Apple",
    0xC0: "Ampere",
}
"""ARM "CPU implementer" codes -> the vendor recorded."""

ARM_CORES: dict[tuple[int, int], str] = {
    (0x41, 0xD08): "Cortex-A72",
    (0x41, 0xD0B): "Cortex-A76",
    (0x41, 0xD0C): "Neoverse N1",
    (0x41, 0xD40): "Neoverse V1",
    (0x41, 0xD49): "Neoverse N2",
    (0x41, 0xD4F): "Neoverse V2",
    (0x46, 0x001): "A64FX",
}
"""(implementer, CPU part) -> the core's name, for ``model_name`` on ARM."""

HALF_PRECISION_ARITHMETIC: dict[str, tuple[str, ...]] = {
    "bfloat16": ("avx512_bf16", "amx_bf16", "bf16"),
    "float16": ("avx512_fp16", "amx_fp16", "asimdhp"),
}
"""The extensions (as ``extensions`` names them) whose instructions compute each half precision:
x86's AVX512_BF16 (bfloat16 dot products) and AMX-BF16 tiles, AVX512-FP16 and AMX-FP16; ARM's
BF16 (BFDOT, BFMMLA) and half-precision NEON (asimdhp).  Every x86-64 and AArch64 processor
computes float64 and float32."""

CACHE_KINDS = {"Data": "data", "Instruction": "instruction", "Unified": "unified"}
"""sysfs cache ``type`` -> :attr:`Cache.kind`."""


@dataclass(frozen=True)
class Cache:
    """One cache of the first CPU: level, kind, size in bytes, logical CPUs sharing one instance."""

    level: int
    kind: str  # "data" | "instruction" | "unified"
    size_bytes: int | None
    shared_by: int | None

    def __post_init__(self) -> None:
        integer("a cache's level", self.level, error=DataError)
        optional_integer("a cache's size_bytes", self.size_bytes, 0, error=DataError)
        optional_integer("a cache's shared_by", self.shared_by, 1, error=DataError)
        if self.kind not in CACHE_KINDS.values():
            kinds = sorted(CACHE_KINDS.values())
            raise DataError(f"a cache's kind must be one of {kinds}, got {self.kind!r}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in sorted(fields(self), key=lambda f: f.name)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cache:
        """The cache of :meth:`to_dict`'s dict; size and sharing read as None where absent."""
        if "level" not in data or "kind" not in data:
            raise DataError(f"a cache of the processor lacks its level or kind: {data!r}")
        return cls(data["level"], data["kind"], data.get("size_bytes"), data.get("shared_by"))


@dataclass(frozen=True)
class Processor:
    """The processor (the fields of the module docstring); None where it could not be read."""

    vendor: str | None = None
    family: int | None = None
    model: int | None = None
    stepping: int | None = None
    model_name: str | None = None
    architecture: str | None = None
    extensions: tuple[str, ...] = ()
    sve_vector_bits: int | None = None
    sockets: int | None = None
    cores: int | None = None
    threads_per_core: int | None = None
    logical_cpus: int | None = None
    caches: tuple[Cache, ...] = ()
    clock_mhz: float | None = None
    max_clock_mhz: float | None = None
    clock_source: str | None = None
    hypervisor: bool | None = None
    blas: str | None = None
    onednn_version: str | None = None
    onednn_isa: str | None = None
    torch_cpu_capability: str | None = None

    def __post_init__(self) -> None:
        for name in ("family", "model", "stepping"):
            optional_integer(f"the processor's {name}", getattr(self, name), 0, error=DataError)
        for name in ("sockets", "cores", "threads_per_core", "logical_cpus", "sve_vector_bits"):
            optional_integer(f"the processor's {name}", getattr(self, name), 1, error=DataError)
        for name in ("clock_mhz", "max_clock_mhz"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise DataError(f"the processor's {name} must be > 0 or None, got {value!r}")
        if not all(isinstance(e, str) for e in self.extensions):
            raise DataError(f"the processor's extensions must be names, got {self.extensions!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-serialisable dict, keys sorted (``extensions`` and ``caches`` as lists)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["extensions"] = list(self.extensions)
        values["caches"] = [c.to_dict() for c in self.caches]
        return dict(sorted(values.items()))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Processor:
        """The record of :meth:`to_dict`'s dict; keys it lacks (older files) are None or empty."""
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        values["extensions"] = tuple(sorted(data.get("extensions") or ()))
        values["caches"] = tuple(Cache.from_dict(c) for c in data.get("caches") or ())
        return cls(**values)


def emulation(processor: Processor, dtype: str) -> str | None:
    """Why ``processor`` does not compute ``dtype`` natively, in words; None where it does.

    The processor's extensions decide (:data:`HALF_PRECISION_ARITHMETIC`), not its name:
    float64 and float32 always; bfloat16 and float16 with an extension that computes them.
    Without one, torch converts the dtype to float32 and back around kernels many times slower
    than float32's, so what aihpc measures by default leaves it out.  A ConfigError names a
    dtype other than these four.
    """
    if dtype in ("float64", "float32"):
        return None
    arithmetic = HALF_PRECISION_ARITHMETIC.get(dtype)
    if arithmetic is None:
        known = ["float64", "float32", *HALF_PRECISION_ARITHMETIC]
        raise ConfigError(f"a processor's dtype must be one of {known}, got {dtype!r}")
    if set(arithmetic) & set(processor.extensions):
        return None
    if not processor.extensions:
        return (
            f"no {dtype} arithmetic is known on this processor (its extensions could not be "
            f"read; {', '.join(arithmetic)} compute {dtype})"
        )
    f16c = dtype == "float16" and "f16c" in processor.extensions
    converts = "; its f16c only converts" if f16c else ""
    return (
        f"this processor has no {dtype} arithmetic (none of {', '.join(arithmetic)}{converts}): "
        f"torch computes {dtype} through float32 conversions, many times slower"
    )


def describe_processor(
    cpuinfo: str | Path = "/proc/cpuinfo",
    sys_cpu: str | Path = "/sys/devices/system/cpu",
    *,
    sve_vector_length: str | Path = "/proc/sys/abi/sve_default_vector_length",
    machine: str | None = None,
) -> Processor:
    """This machine's processor, from ``cpuinfo``, ``sys_cpu`` and this process's torch.

    ``sve_vector_length`` is the file of SVE's default vector length in bytes (read only
    where the processor has SVE); ``machine`` is the architecture (default
    ``platform.machine()``).  Tests pass fixture files.  Never raises for a missing
    or unreadable file: the fields it would give are None.
    """
    blocks = parse_cpuinfo(_read(cpuinfo) or "")
    sys_dir = Path(sys_cpu)
    flags = cpu_flags(blocks)
    extensions = vector_extensions(flags or ())
    sockets, cores, threads_per_core, logical = topology(blocks, sys_dir)
    hypervisor = "hypervisor" in flags if flags is not None and _first(blocks, "flags") else None
    clock, clock_from = base_clock(blocks)
    max_khz = _number(_read(sys_dir / "cpu0" / "cpufreq" / "cpuinfo_max_freq"))
    max_clock = max_khz / 1000 if max_khz else None
    sve_bytes = _integer(_read(sve_vector_length)) if "sve" in extensions else None
    libraries: dict[str, Any] = torch_libraries()
    return Processor(
        **cpu_identity(blocks),
        architecture=machine if machine is not None else (platform.machine() or None),
        extensions=extensions,
        sve_vector_bits=8 * sve_bytes if sve_bytes else None,
        sockets=sockets,
        cores=cores,
        threads_per_core=threads_per_core,
        logical_cpus=logical,
        caches=read_caches(sys_dir / "cpu0"),
        clock_mhz=clock,
        max_clock_mhz=max_clock,
        clock_source=clock_source(clock_from, max_clock is not None, hypervisor),
        hypervisor=hypervisor,
        **libraries,
    )


# -- /proc/cpuinfo ----------------------------------------------------------------------------
def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """The blocks of /proc/cpuinfo text, one ``{key: value}`` per blank-line-separated block
    (one per logical CPU; on some ARM kernels a last block of machine-wide lines)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if not line.strip() and current:
                blocks.append(current)
                current = {}
            continue
        current.setdefault(key.strip(), value.strip())
    if current:
        blocks.append(current)
    return blocks


def _cpus(blocks: list[dict[str, str]]) -> list[dict[str, str]]:
    """The blocks that describe one logical CPU each."""
    return [b for b in blocks if b.get("processor", "").isdigit()]


def _first(blocks: list[dict[str, str]], key: str) -> str | None:
    """The first non-empty value of ``key`` in ``blocks``."""
    return next((b[key] for b in blocks if b.get(key)), None)


def cpu_identity(blocks: list[dict[str, str]]) -> dict[str, Any]:
    """vendor, family, model, stepping, model_name of parsed cpuinfo (the module docstring's
    ARM mapping: CPU architecture, CPU part, CPU revision; the variant in the name's rVpR)."""
    implementer = _integer(_first(blocks, "CPU implementer"))
    if _first(blocks, "vendor_id") is not None or implementer is None:
        return {
            "vendor": _first(blocks, "vendor_id"),
            "family": _integer(_first(blocks, "cpu family")),
            "model": _integer(_first(blocks, "model")),
            "stepping": _integer(_first(blocks, "stepping")),
            "model_name": _first(blocks, "model name"),
        }
    part = _integer(_first(blocks, "CPU part"))
    variant = _integer(_first(blocks, "CPU variant"))
    revision = _integer(_first(blocks, "CPU revision"))
    name = _first(blocks, "model name")
    if name is None and part is not None:
        core = ARM_CORES.get((implementer, part), f"part 0x{part:03x}")
        name = f"{core} r{variant or 0}p{revision or 0}"
    return {
        "vendor": ARM_IMPLEMENTERS.get(implementer, f"0x{implementer:02x}"),
        "family": _integer(_first(blocks, "CPU architecture")),
        "model": part,
        "stepping": revision,
        "model_name": name,
    }


def cpu_flags(blocks: list[dict[str, str]]) -> frozenset[str] | None:
    """The x86 "flags" or ARM "Features" of the first CPU; None where cpuinfo has neither."""
    line = _first(blocks, "flags") or _first(blocks, "Features")
    return None if line is None else frozenset(line.split())


def vector_extensions(flags: Iterable[str]) -> tuple[str, ...]:
    """The sorted vector extensions among ``flags`` (x86 flags or ARM Features; asimd as "neon")."""
    known = X86_EXTENSIONS | ARM_EXTENSIONS.keys()
    return tuple(sorted({ARM_EXTENSIONS.get(f, f) for f in set(flags) & known}))


def base_clock(blocks: list[dict[str, str]]) -> tuple[float | None, str | None]:
    """(MHz, "cpuinfo" or "model name"): cpuinfo's "cpu MHz" of the first CPU, else the model
    name's "@ 2.30GHz"; (None, None) where neither is there."""
    mhz = _number(_first(blocks, "cpu MHz"))
    if mhz:
        return mhz, "cpuinfo"
    match = re.search(r"@\s*(\d+(?:\.\d+)?)\s*GHz", _first(blocks, "model name") or "")
    if match:
        return float(match.group(1)) * 1000, "model name"
    return None, None


def clock_source(clock_from: str | None, has_max: bool, hypervisor: bool | None) -> str | None:
    """Where the nominal peak's clock comes from (cpufreq's maximum where there is one), and
    what that means for the peak; None where no clock is known."""
    guest = "a hypervisor guest without cpufreq: the boost clock is hidden, so the nominal peak "
    guest += "may be below what the processor does"
    if has_max:
        return (
            "cpufreq's cpuinfo_max_freq, the highest clock one core reaches: with every core "
            "busy in wide vectors the clock is lower, so the nominal peak is an upper bound"
        )
    if clock_from == "cpuinfo":
        if hypervisor:
            return f"/proc/cpuinfo 'cpu MHz' of {guest}"
        return "/proc/cpuinfo 'cpu MHz', the clock when it was read (not the boost clock)"
    if clock_from == "model name":
        if hypervisor:
            return f"the model name's rated base clock, in {guest}"
        return "the model name's rated base clock (not the boost clock)"
    return None


# -- topology and caches ----------------------------------------------------------------------
def topology(
    blocks: list[dict[str, str]], sys_cpu: Path
) -> tuple[int | None, int | None, int | None, int | None]:
    """(sockets, cores, threads per core, logical CPUs): from cpuinfo's "physical id" and
    "core id", else sysfs ``cpuN/topology``, else psutil (no sockets)."""
    cpus = _cpus(blocks)
    logical: int | None = len(cpus) or None
    ids = [(b.get("physical id"), b.get("core id")) for b in cpus]
    if cpus and all(p is not None and c is not None for p, c in ids):
        sockets: int | None = len({p for p, _ in ids})
        cores: int | None = len(set(ids))
    else:
        sockets, cores, sys_logical = _sysfs_topology(sys_cpu)
        logical = logical or sys_logical
    if cores is None or logical is None:
        cores, logical = cores or _psutil_count(False), logical or _psutil_count(True)
    per_core = max(1, round(logical / cores)) if cores and logical else None
    return sockets, cores, per_core, logical


def _sysfs_topology(sys_cpu: Path) -> tuple[int | None, int | None, int | None]:
    """(sockets, cores, logical CPUs) from ``cpuN/topology``: distinct package ids, distinct
    sets of thread siblings."""
    packages, siblings, logical = set(), set(), 0
    with contextlib.suppress(OSError):
        for cpu in sys_cpu.iterdir():
            if not re.fullmatch(r"cpu\d+", cpu.name):
                continue
            package = _read(cpu / "topology" / "physical_package_id")
            thread_siblings = _read(cpu / "topology" / "thread_siblings_list")
            if package is None or thread_siblings is None:
                continue
            logical += 1
            packages.add(package.strip())
            siblings.add(thread_siblings.strip())
    if not logical:
        return None, None, None
    return len(packages), len(siblings), logical


def _psutil_count(logical: bool) -> int | None:
    try:
        import psutil

        count = psutil.cpu_count(logical=logical)
    except Exception:  # noqa: BLE001 - metadata is best effort
        return None
    return int(count) if count else None


def read_caches(cpu_dir: Path) -> tuple[Cache, ...]:
    """The caches of one CPU from its sysfs ``cache/index*`` (level, type, size, shared_cpu_list),
    by level and kind; () where sysfs has none."""
    caches = []
    with contextlib.suppress(OSError):
        for index in sorted((cpu_dir / "cache").glob("index*")):
            level = _integer(_read(index / "level"))
            kind = CACHE_KINDS.get((_read(index / "type") or "").strip())
            if level is None or level < 1 or kind is None:
                continue
            size = parse_size(_read(index / "size"))
            shared = cpu_list_count(_read(index / "shared_cpu_list"))
            caches.append(Cache(level, kind, size, shared))
    return tuple(sorted(caches, key=lambda c: (c.level, c.kind)))


def parse_size(text: str | None) -> int | None:
    """Bytes of a sysfs size such as "48K", "2048K", "32M"; None where it does not parse."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", text or "")
    if match is None:
        return None
    return int(match.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2)]


def cpu_list_count(text: str | None) -> int | None:
    """The number of CPUs in a sysfs CPU list such as "0-1,4"; None where it does not parse."""
    if not text or not text.strip():
        return None
    count = 0
    for part in text.strip().split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if match is None:
            return None
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        count += max(0, last - first + 1)
    return count or None


# -- small readers ----------------------------------------------------------------------------
def _read(path: str | Path) -> str | None:
    """The text of ``path``, or None where it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _integer(text: str | None) -> int | None:
    """A decimal or 0x-hex integer, or None."""
    if text is None:
        return None
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def _number(text: str | None) -> float | None:
    """A finite number > 0, or None."""
    try:
        value = float((text or "").strip())
    except ValueError:
        return None
    return value if 0 < value < float("inf") else None
