"""RAPL read from a powercap tree built in tmp_path: several packages, DRAM, a wrap, the reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from aihpc.energy.meter import Sampler
from aihpc.energy.rapl import find_zones, rapl_counters

MAX_UJ = 262143328850  # a Xeon package's max_energy_range_uj


def zone(root: Path, name: str, label: str, energy_uj: int, max_uj: int = MAX_UJ) -> Path:
    """One powercap zone as the kernel lists it: a flat directory under the class."""
    path = root / name
    path.mkdir(parents=True)
    (path / "name").write_text(label + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return path


@pytest.fixture
def powercap(tmp_path: Path) -> Path:
    """Two packages, package 0 with core and DRAM sub-zones, a psys zone and an mmio duplicate."""
    root = tmp_path / "powercap"
    zone(root, "intel-rapl:0", "package-0", 1_000_000)
    zone(root, "intel-rapl:0:0", "core", 500_000)
    zone(root, "intel-rapl:0:1", "dram", 200_000, max_uj=65712999613)
    zone(root, "intel-rapl:1", "package-1", MAX_UJ - 3_000_000)  # wraps at the next reading
    zone(root, "intel-rapl:2", "psys", 7)
    zone(root, "intel-rapl-mmio:0", "package-0", 1_000_000)
    (root / "intel-rapl").mkdir()  # the control type's own directory
    return root


def write(path: Path, energy_uj: int) -> None:
    (path / "energy_uj").write_text(f"{energy_uj}\n")


def test_finds_packages_and_dram_but_not_core_psys_or_mmio(powercap: Path) -> None:
    zones, reason = find_zones(powercap)
    assert reason is None
    assert [(z.name, z.max_energy_range_uj) for z in zones] == [
        ("package-0", MAX_UJ),
        ("package-0/dram", 65712999613),
        ("package-1", MAX_UJ),
    ]


def test_sampled_energy_of_two_packages_with_a_wrap(powercap: Path) -> None:
    counters, reason = rapl_counters(powercap, host="node1")
    assert reason is None and [c.host for c in counters] == ["node1"] * 3
    sampler = Sampler(counters, interval_s=3600).start()  # readings at start and stop only
    write(powercap / "intel-rapl:0", 1_000_000 + 45_000_000)  # +45 J
    write(powercap / "intel-rapl:0:1", 200_000 + 5_500_000)  # +5.5 J
    write(powercap / "intel-rapl:1", 2_000_000)  # wrapped: 3 J to the top, 2 J after
    package0, dram, package1 = sampler.stop()
    assert package0.joules == pytest.approx(45.0) and package0.wraps == 0
    assert dram.joules == pytest.approx(5.5)
    assert package1.joules == pytest.approx(5.0) and package1.wraps == 1
    assert package1.source == "rapl" and package1.device == "package-1" and package1.samples == 2


def test_no_powercap_directory_gives_the_reason(tmp_path: Path) -> None:
    missing = tmp_path / "none"
    assert find_zones(missing) == (
        [],
        f"no RAPL: {missing} does not exist "
        "(no powercap in this kernel, or not exposed to this host)",
    )


def test_a_tree_without_rapl_zones_gives_the_reason(tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    zone(root, "intel-rapl:0", "psys", 1)
    assert find_zones(root) == ([], f"no RAPL package or DRAM zones under {root}")


def test_a_zone_without_energy_uj_makes_the_reading_fail(powercap: Path) -> None:
    (powercap / "intel-rapl:1" / "energy_uj").unlink()  # as a counter the kernel does not expose
    zones, reason = find_zones(powercap)
    assert zones == []
    assert reason.startswith(f"RAPL zone {powercap / 'intel-rapl:1'} cannot be read: ")


def test_this_machine_reads_rapl_or_says_why() -> None:
    counters, reason = rapl_counters()
    assert (counters == []) == (reason is not None)
    if not Path("/sys/class/powercap").exists():
        assert reason.startswith("no RAPL: /sys/class/powercap does not exist")
