"""The meter's arithmetic (wraps, restarts, gaps), its sampling thread, NVML's readings."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from aihpc.energy.meter import Accumulator, DeviceEnergy, Sampler, counter_delta, replay

FIXTURES = Path(__file__).parent / "fixtures"


def test_counter_delta_rises_wraps_and_restarts() -> None:
    assert counter_delta(10.0, 12.5, None) == (2.5, None)
    assert counter_delta(90.0, 5.0, 100.0) == (15.0, "wrap")  # a wrap range: it went round once
    assert counter_delta(90.0, 5.0, None) == (5.0, "reset")  # none: it restarted from zero


def test_recorded_nvml_readings_through_the_accounting() -> None:
    """The NVML side: millijoules since driver load, a 3 s gap and a driver reload, replayed."""
    doc = json.loads((FIXTURES / "nvml_readings.json").read_text())
    acc = replay(
        [(t, mj / 1e3) for t, mj in doc["readings"]], wrap_j=None
    )  # as NvmlCounter.read converts
    record = acc.record(doc["gpu"], "node1", "nvml")
    expected = doc["expected"]
    assert record.joules == pytest.approx(expected["joules"])
    assert record.seconds == pytest.approx(expected["seconds"])
    assert record.watts == pytest.approx(expected["joules"] / expected["seconds"])  # 269.3 W
    assert record.samples == expected["samples"]
    assert record.max_interval_s == pytest.approx(expected["max_interval_s"])
    assert (record.resets, record.wraps) == (expected["resets"], 0)


def test_one_reading_is_not_a_measurement() -> None:
    acc = replay([(0.0, 5.0)], wrap_j=None)
    record = acc.record("GPU x", "h", "nvml")
    assert record.joules is None and record.watts is None
    assert record.reason == "only 1 reading(s) of the counter"


def test_device_energy_round_trips() -> None:
    record = replay([(0.0, 1.0), (2.0, 101.0)], wrap_j=None).record("package-0", "h", "rapl")
    assert record.watts == pytest.approx(50.0)
    assert DeviceEnergy.from_dict(record.to_dict()) == record
    assert (
        DeviceEnergy.from_dict({"device": "d", "host": "h", "source": "rapl", "reason": "r"}).joules
        is None
    )


class _Ramp:
    """A counter rising 10 J per read, wrapping at 25 J (a real counter object, not a stand-in)."""

    device, host, source, wrap_j = "ramp", "h", "test", 25.0

    def __init__(self) -> None:
        self.value = 0.0

    def read(self) -> float:
        self.value = (self.value + 10.0) % 25.0
        return self.value


class _Broken:
    device, host, source, wrap_j = "broken", "h", "test", None

    def read(self) -> float:
        raise OSError("gone")


def test_sampler_reads_at_least_once_a_second_and_sums_through_wraps() -> None:
    ramp = _Ramp()
    sampler = Sampler([ramp, _Broken()], interval_s=0.05).start()
    time.sleep(0.4)
    ramped, broken = sampler.stop()
    assert ramped.samples >= 4  # start, >= 2 in 0.4 s at 0.05 s even on a loaded machine, stop
    assert ramped.joules == pytest.approx(
        10.0 * (ramped.samples - 1)
    )  # every read +10 J, wraps included
    assert ramped.wraps >= 1 and ramped.resets == 0
    assert ramped.max_interval_s < 1.0
    assert broken.joules is None and broken.reason == "reading the counter failed: OSError: gone"


def test_accumulator_counts_gaps() -> None:
    acc = Accumulator(wrap_j=None)
    for t, v in ((0.0, 0.0), (0.5, 1.0), (4.5, 9.0)):
        acc.add(t, v)
    assert acc.max_interval_s == pytest.approx(4.0) and acc.joules == pytest.approx(9.0)


def test_an_accumulator_resumed_from_its_state_counts_the_gap_through_a_wrap() -> None:
    """A meter killed with its worker and started again from its last saved state: the readings
    before, across the gap (a wrap of the counter meanwhile) and after sum as one meter's."""
    readings = [(0.0, 80.0), (1.0, 90.0), (9.0, 20.0), (10.0, 25.0)]  # wraps at 100 in the gap
    whole = replay(readings, wrap_j=100.0).record("package-0", "h", "rapl")
    before = replay(readings[:2], wrap_j=100.0).state()
    resumed = Accumulator.resumed(100.0, json.loads(json.dumps(before)))  # as the file holds it
    for t, value in readings[2:]:
        resumed.add(t, value)
    assert resumed.record("package-0", "h", "rapl") == whole
    assert (whole.joules, whole.wraps, whole.max_interval_s, whole.samples) == (45.0, 1, 8.0, 4)


def test_a_sampler_hands_its_states_to_be_saved_and_goes_on_from_them() -> None:
    class Counter:
        device, host, source, wrap_j = "package-0", "h", "rapl", None

        def __init__(self) -> None:
            self.value = 100.0

        def read(self) -> float:
            self.value += 1.0
            return self.value

    saved: list[list[dict]] = []
    counter = Counter()
    first = Sampler([counter], interval_s=0.01, on_save=saved.append, save_every_s=0.02).start()
    time.sleep(0.2)
    first.stop()
    assert saved and saved[-1][0]["samples"] >= 2
    counted = saved[-1][0]["joules"]
    second = Sampler([counter], interval_s=0.01, saved=[saved[-1][0]]).start()
    (record,) = second.stop()
    # every read adds 1 J: the second meter counts from the first's last saved reading on
    assert record.joules == pytest.approx(counter.value - 100.0 - 1.0)
    assert record.joules > counted
