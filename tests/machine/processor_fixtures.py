"""cpuinfo texts and sysfs trees of four processors, shared by the processor and nominal-peak tests.

* ``intel_guest``: the 2-vCPU KVM guest these tests were written on (Emerald Rapids, family 6
  model 207, the real name hidden, "cpu MHz" 2300, no cpufreq, AVX-512 with bf16 and fp16);
* ``amd_zen5``: a 2-vCPU guest on an AMD EPYC Zen 5 (family 26), AVX-512 with bf16, no fp16,
  no AMX;
* ``intel_spr``: a cut-down Sapphire Rapids bare metal (2 cores x 2 threads), AMX, cpufreq's
  maximum 3.8 GHz;
* ``arm_grace``: a cut-down NVIDIA Grace (Arm Neoverse V2, 4 cores), SVE2 at 128 bits, bf16,
  cpufreq's maximum 3.1 GHz; its topology is in sysfs only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aihpc.machine.processor import Processor, describe_processor

_INTEL_GUEST_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology "
    "nonstop_tsc cpuid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic "
    "movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm abm "
    "3dnowprefetch cpuid_fault fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm "
    "avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw "
    "avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 arat avx512vbmi umip "
    "avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid "
    "cldemote movdiri movdir64b fsrm serialize tsxldtrk avx512_fp16 arch_capabilities"
)

_AMD_ZEN5_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl "
    "nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 "
    "x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy "
    "abm sse4a misalignsse 3dnowprefetch osvw topoext fsgsbase bmi1 avx2 smep bmi2 erms "
    "invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni "
    "avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 clzero xsaveerptr "
    "arat avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni "
    "avx512_bitalg avx512_vpopcntdq rdpid movdiri movdir64b avx512_vp2intersect"
)

_INTEL_SPR_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi "
    "mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon "
    "pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni "
    "pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca "
    "sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm "
    "abm 3dnowprefetch cpuid_fault epb cat_l3 cat_l2 cdp_l3 invpcid_single cdp_l2 ssbd mba "
    "ibrs ibpb stibp ibrs_enhanced tpr_shadow flexpriority ept vpid ept_ad fsgsbase tsc_adjust "
    "bmi1 hle avx2 smep bmi2 erms invpcid rtm cqm rdt_a avx512f avx512dq rdseed adx smap "
    "avx512ifma clflushopt clwb intel_pt avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec "
    "xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local split_lock_detect "
    "avx_vnni avx512_bf16 wbnoinvd dtherm ida arat pln pts hfi vnmi avx512vbmi umip pku ospke "
    "waitpkg avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq "
    "la57 rdpid bus_lock_detect cldemote movdiri movdir64b enqcmd fsrm md_clear serialize "
    "tsxldtrk pconfig arch_lbr ibt amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d "
    "arch_capabilities"
)

_GRACE_FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma "
    "lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca "
    "pacg dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svebf16 "
    "i8mm bf16 dgh bti"
)


def _x86_block(cpu: int, ident: str, mhz: str, ids: tuple[int, int, int, int], flags: str) -> str:
    """One logical CPU's block: ``ids`` are physical id, siblings, core id, cpu cores."""
    physical, siblings, core, cores = ids
    return (
        f"processor\t: {cpu}\n{ident}microcode\t: 0x1\ncpu MHz\t\t: {mhz}\n"
        f"physical id\t: {physical}\nsiblings\t: {siblings}\ncore id\t\t: {core}\n"
        f"cpu cores\t: {cores}\nfpu\t\t: yes\nflags\t\t: {flags}\nbogomips\t: 4600.00\n"
        "power management:\n\n"
    )


_INTEL_GUEST_ID = (
    "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n"
    "model name\t: Intel(R) Xeon(R) Processor\nstepping\t: 2\n"
)
_AMD_ZEN5_ID = (
    "vendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
    "model name\t: AMD EPYC 9455 48-Core Processor\nstepping\t: 1\n"
)
_INTEL_SPR_ID = (
    "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8480+\nstepping\t: 8\n"
)

INTEL_GUEST = "".join(
    _x86_block(i, _INTEL_GUEST_ID, "2300.000", (0, 2, i, 2), _INTEL_GUEST_FLAGS) for i in (0, 1)
)
AMD_ZEN5 = "".join(
    _x86_block(i, _AMD_ZEN5_ID, "2700.000", (0, 2, i, 2), _AMD_ZEN5_FLAGS) for i in (0, 1)
)
INTEL_SPR = "".join(  # CPUs 0 and 2 are core 0's two threads, 1 and 3 core 1's
    _x86_block(i, _INTEL_SPR_ID, "2000.000", (0, 4, i % 2, 2), _INTEL_SPR_FLAGS) for i in range(4)
)
ARM_GRACE = "".join(
    f"processor\t: {i}\nBogoMIPS\t: 2000.00\nFeatures\t: {_GRACE_FEATURES}\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\n"
    "CPU revision\t: 0\n\n"
    for i in range(4)
)


@dataclass(frozen=True)
class Machine:
    """A fixture machine: its cpuinfo, sysfs contents and architecture."""

    cpuinfo: str
    machine: str
    logical: int
    siblings: tuple[str, ...]  # thread_siblings_list of each CPU
    caches: tuple[tuple[int, str, str, str], ...]  # level, type, size, shared_cpu_list of cpu0
    max_khz: int | None = None
    sve_bytes: int | None = None


MACHINES: dict[str, Machine] = {
    "intel_guest": Machine(
        INTEL_GUEST,
        "x86_64",
        2,
        ("0", "1"),
        ((1, "Data", "48K", "0"), (1, "Instruction", "32K", "0"), (2, "Unified", "2048K", "0"))
        + ((3, "Unified", "266240K", "0-1"),),
    ),
    "amd_zen5": Machine(
        AMD_ZEN5,
        "x86_64",
        2,
        ("0", "1"),
        ((1, "Data", "48K", "0"), (1, "Instruction", "32K", "0"), (2, "Unified", "1024K", "0"))
        + ((3, "Unified", "32768K", "0-1"),),
    ),
    "intel_spr": Machine(
        INTEL_SPR,
        "x86_64",
        4,
        ("0,2", "1,3", "0,2", "1,3"),
        ((1, "Data", "48K", "0,2"), (1, "Instruction", "32K", "0,2"))
        + ((2, "Unified", "2048K", "0,2"), (3, "Unified", "107520K", "0-3")),
        max_khz=3800000,
    ),
    "arm_grace": Machine(
        ARM_GRACE,
        "aarch64",
        4,
        ("0", "1", "2", "3"),
        ((1, "Data", "64K", "0"), (1, "Instruction", "64K", "0"), (2, "Unified", "1024K", "0"))
        + ((3, "Unified", "114688K", "0-3"),),
        max_khz=3100000,
        sve_bytes=16,
    ),
}


def write_machine(root: Path, name: str) -> tuple[Path, Path, Path]:
    """Write ``name``'s cpuinfo, sysfs tree and SVE length under ``root``; their paths."""
    machine = MACHINES[name]
    root.mkdir(parents=True, exist_ok=True)
    cpuinfo, sys_cpu, sve = root / "cpuinfo", root / "cpu", root / "sve_default_vector_length"
    cpuinfo.write_text(machine.cpuinfo)
    for cpu in range(machine.logical):
        topology = sys_cpu / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "thread_siblings_list").write_text(machine.siblings[cpu] + "\n")
    for i, (level, kind, size, shared) in enumerate(machine.caches):
        index = sys_cpu / "cpu0" / "cache" / f"index{i}"
        index.mkdir(parents=True)
        for file, text in (("level", level), ("type", kind), ("size", size)):
            (index / file).write_text(f"{text}\n")
        (index / "shared_cpu_list").write_text(f"{shared}\n")
    if machine.max_khz is not None:
        (sys_cpu / "cpu0" / "cpufreq").mkdir()
        (sys_cpu / "cpu0" / "cpufreq" / "cpuinfo_max_freq").write_text(f"{machine.max_khz}\n")
    if machine.sve_bytes is not None:
        sve.write_text(f"{machine.sve_bytes}\n")
    return cpuinfo, sys_cpu, sve


def fixture_processor(root: Path, name: str) -> Processor:
    """The :class:`Processor` that :func:`describe_processor` reads from machine ``name``."""
    cpuinfo, sys_cpu, sve = write_machine(root / name, name)
    return describe_processor(
        cpuinfo, sys_cpu, sve_vector_length=sve, machine=MACHINES[name].machine
    )
