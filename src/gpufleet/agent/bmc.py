"""The node's BMC in the agent: a thread reads it (sources/node/bmc.py: `ipmitool sdr elist` and `sel elist`, each
under a timeout) every `interval_s`, never on the collector's clock (a BMC takes seconds to list its sensors), and
the collector writes the last read into each frame.

- Series (declared in telemetry/data/fields.csv, filled by source "bmc" in agent/fields.py): each fan's speed
  (`gpufleet_node_fan_speed_rpm`, or `_ratio` where the BMC gives percent of full speed, as HPE's iLO does), each
  chassis temperature (`gpufleet_node_temperature_celsius`: inlet, exhaust, board, ...), each power reading
  (`gpufleet_node_power_watts`) and the judged state of every fan, power supply and temperature sensor
  (`gpufleet_node_sensor_state`: 0 ok, 1 warning, 2 critical; health/bmc.py), labelled by the sensor's name.
- Each read goes to `deliver` (the agent's edge, which runs the BMC detectors) with the SEL records new since the last
  read; how far the SEL was read is kept in `positions` (the agent's spool, as the kernel log's position is) once the
  read was handed on.
- No ipmitool, no /dev/ipmi0, no permission or a BMC that does not answer: one log line (the collector's) and
  `gpufleet_source_up{source="bmc"} 0` with the reason, tried again every interval; the rest of the agent goes on.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable

from gpufleet.agent.collector import SourceDown
from gpufleet.agent.kernel import MemoryPositions, Positions
from gpufleet.background import Background
from gpufleet.errors import GpufleetError
from gpufleet.health.bmc import sensor_state
from gpufleet.model.bmc import BmcRead, BmcSensor
from gpufleet.sources.node.bmc import IpmiTool, new_entries, position, read_bmc
from gpufleet.telemetry.frame import LabelItems, MetricFrame, label_items

log = logging.getLogger("gpufleet.agent")

DEFAULT_INTERVAL_S = 60.0
POSITION_KEY = "bmc_sel"
FAN_RPM = "gpufleet_node_fan_speed_rpm"
FAN_RATIO = "gpufleet_node_fan_speed_ratio"
TEMPERATURE = "gpufleet_node_temperature_celsius"
POWER = "gpufleet_node_power_watts"
SENSOR_STATE = "gpufleet_node_sensor_state"
FIELDS = (FAN_RPM, FAN_RATIO, TEMPERATURE, POWER, SENSOR_STATE)  # the catalog fields this source fills
_JUDGED = ("fan", "psu", "temperature")


def series_labels(sensors: tuple[BmcSensor, ...]) -> list[str]:
    """Each sensor's `sensor` label: its name, with its number (or place) where the name repeats (Dell's `Temp`)."""
    counts = Counter(s.name for s in sensors)
    out = []
    for i, s in enumerate(sensors):
        if counts[s.name] == 1:
            out.append(s.name)
        else:
            out.append(f"{s.name} {s.number:02X}h" if s.number is not None else f"{s.name} #{i + 1}")
    return out


def fill(frame: MetricFrame, sensors: tuple[BmcSensor, ...]) -> set[tuple[str, LabelItems]]:
    """Write the sensors' series into `frame`; the (name, labels) written."""
    written: set[tuple[str, LabelItems]] = set()

    def put(name: str, labels: dict[str, str], value: float) -> None:
        if math.isfinite(value):
            frame.set_gauge(name, labels, value)
            written.add((name, label_items(labels)))

    for sensor, label in zip(sensors, series_labels(sensors), strict=True):
        labels = {"sensor": label}
        unit = sensor.unit.lower()
        if sensor.reading is not None:
            if sensor.kind == "fan" and unit == "rpm":
                put(FAN_RPM, labels, sensor.reading)
            elif sensor.kind == "fan" and unit == "percent":
                put(FAN_RATIO, labels, sensor.reading / 100.0)
            elif sensor.kind == "temperature" and unit == "degrees c":
                put(TEMPERATURE, labels, sensor.reading)
            elif sensor.kind == "power" and unit == "watts":
                put(POWER, labels, sensor.reading)
        if sensor.kind in _JUDGED:
            put(SENSOR_STATE, {**labels, "type": sensor.kind}, sensor_state(sensor))
    return written


class BmcWatch(Background):
    """The BMC reader: a thread that reads every `interval_s`, and the metric source that writes its last read."""

    thread_name = "bmc"
    join_s = 5.0
    name = "bmc"  # as gpufleet_source_up names it
    fields = FIELDS

    def __init__(
        self,
        node: str,
        tool: IpmiTool | None = None,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        positions: Positions | None = None,
        deliver: Callable[[BmcRead], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self.tool = tool or IpmiTool()
        self.interval_s = interval_s
        self.positions: Positions = positions or MemoryPositions()
        self.deliver: Callable[[BmcRead], None] = deliver or (lambda read: None)
        self.clock = clock
        self._lock = threading.Lock()
        self._sensors: tuple[BmcSensor, ...] = ()
        self._up: bool | None = None  # None until the first read
        self._why = ""
        self._written: set[tuple[str, LabelItems]] = set()
        self._drawn: tuple[BmcSensor, ...] | None = None
        self.reads = 0
        super().__init__()

    # -- its own thread ------------------------------------------------------------------------------------------
    def run(self) -> None:
        while not self.stopping.is_set():
            self.read_once()
            self.stopping.wait(self.interval_s)

    def read_once(self) -> BmcRead | None:
        """Read the sensors and the SEL and hand them on; None when the BMC could not be read (said in source_up)."""
        try:
            sensors, entries = read_bmc(self.tool)
        except GpufleetError as exc:
            self._status(False, exc.message)
            return None
        except Exception as exc:  # the agent keeps running without its BMC
            self._status(False, f"{type(exc).__name__}: {exc}")
            return None
        fresh = new_entries(entries, self.positions.get(POSITION_KEY))
        if fresh is None and entries:
            log.info("bmc: %d SEL record(s) were there before this agent; records from now on are reported",
                     len(entries))  # fmt: skip
        with self._lock:
            self._sensors = sensors
        read = BmcRead(self.node, self.clock(), sensors, tuple(fresh or ()))
        try:
            self.deliver(read)  # handed on before the position moves past it: a restart in between re-reads
        except Exception:  # the series go on even when the edge missed a read
            log.exception("bmc: a read of the BMC was not handed to the detectors")
            return None
        if entries:
            self.positions.set(POSITION_KEY, position(entries[-1]))
        self.reads += 1
        self._status(True, "")
        return read

    def _status(self, ok: bool, why: str) -> None:
        with self._lock:
            self._up, self._why = ok, why

    # -- the collector's thread ----------------------------------------------------------------------------------
    def collect(self, frame: MetricFrame) -> None:
        with self._lock:
            sensors, up, why = self._sensors, self._up, self._why
        if sensors is not self._drawn:  # a new read: its series replace the last one's
            for name, labels in self._written:
                frame.remove_gauge(name, dict(labels))
            self._written = fill(frame, sensors)
            self._drawn = sensors
        if up is None:
            raise SourceDown(None)
        if not up:
            raise SourceDown(why)
