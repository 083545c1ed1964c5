"""`mlxlink -d <dev> [-p <port>] [-m] [-c] [-e]` (NVIDIA MFT, or `mstlink` from mstflint): one port's link as the
adapter or switch firmware sees it, in sections.

Layout (MFT 4.14 to 4.34 documentation, "mlxlink Utility"; mstflint mlxlink_commander.cpp): a section title, a line
of dashes, then `Key<spaces>: value` lines, for example

    Operational Info
    ----------------
    State                           : Active
    Physical state                  : LinkUp
    Speed                           : IB-HDR
    Width                           : 4x
    FEC                             : Standard LL RS-FEC - RS(271,257)

The sections: `Operational Info` (State: Active, Polling, Disable, ...; Physical state; Speed as `IB-HDR`,
`200G`, `100GbE`; Width `4x`; FEC), `Supported Info` (`Enabled Link Speed (Ext.)` and `Supported Cable Speed (Ext.)`,
each `0x... (HDR,EDR,...)`), `Troubleshooting Info` (`Status Opcode`, `Group Opcode`, `Recommendation`: "No issue
was observed" when the firmware sees nothing wrong), `Tool Information`, and with `-m` `Module Info`, with `-c`
`Physical Counters and BER Info` (`Time Since Last Clear [Min]`, `Effective Physical Errors` (after FEC),
`Effective Physical BER`, `Raw Physical Errors Per Lane`, `Raw Physical BER` (before FEC), `Link Down Counter`,
`Link Error Recovery Counter`, on InfiniBand also `Symbol Errors` and `Symbol BER`), with `-e` `EYE Opening Info`.
A BER is printed as `<coefficient>E-<magnitude>` (`15E-255` is how firmware writes "no errors yet").
`--json` prints the same sections under `result.output`; both are read. Warnings and errors go to stderr
(`-E- ...`) and are kept as diagnostics.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

MAX_LINE_CHARS = 4096
_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z][\w ()/\[\].,#+-]*?)\s*:\s?(?P<value>.*?)\s*$")
_RULE = re.compile(r"^-{3,}\s*$")
_TITLE = re.compile(r"^[A-Z][A-Za-z /()&-]{2,60}$")
_DIAGNOSTIC = re.compile(r"^-[EWI]-\s|^(?:mlxlink|mstlink): |^Error|^Warning|^Note:")
_BER = re.compile(r"^(?P<coef>\d+(?:\.\d+)?)E(?P<exp>[-+]?\d+)$", re.IGNORECASE)
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
# titles read as such even without their rule line (a `grep` of the output keeps the title, not the dashes)
KNOWN_SECTIONS = frozenset({"Operational Info", "Supported Info", "Troubleshooting Info", "Tool Information",
                            "Module Info", "Physical Counters and BER Info", "EYE Opening Info", "FEC Capability Info",
                            "Histogram of FEC Errors", "Test Mode Info", "Port Information"})  # fmt: skip


def ber(text: str | None) -> float | None:
    """`15E-255` -> 1.5e-254 (firmware's "none yet"); `1E-12`; `N/A` -> None."""
    m = _BER.match((text or "").strip())
    if m is None:
        return None
    try:
        return float(m.group("coef")) * 10.0 ** int(m.group("exp"))
    except OverflowError:
        return None


def number(text: str | None) -> float | None:
    value = (text or "").strip()
    return float(value) if _NUMBER.match(value) else None


@dataclass
class Mlxlink:
    sections: dict[str, dict[str, str]] = field(default_factory=dict)  # title -> key -> value as printed
    lines: dict[str, str] = field(default_factory=dict)  # "Section/Key" -> the line it came from
    device: str | None = None  # from the command line when it is in the paste (`mlxlink -d mlx5_0 -p 1`)
    port: str | None = None
    diagnostics: list[str] = field(default_factory=list)
    unreadable: list[tuple[int, str]] = field(default_factory=list)
    json: bool = False

    def get(self, section: str, key: str) -> str | None:
        """A value by its section and key; a key whose name varies by version (`Enabled Link Speed (Ext.)`)
        matches by its start."""
        for title in (section, *(t for t in self.sections if t != section)):  # an excerpt's keys may sit elsewhere
            values = self.sections.get(title, {})
            if key in values:
                return values[key]
            for name, value in values.items():
                if name.startswith(key):
                    return value
        return None

    def has(self, section: str) -> bool:
        return bool(self.sections.get(section))

    def line(self, section: str, key: str) -> str:
        for name, line in self.lines.items():
            if name == f"{section}/{key}" or name.startswith(f"{section}/{key}"):
                return line
        for name, line in self.lines.items():
            if name.partition("/")[2].startswith(key):
                return line
        return ""


_COMMAND = re.compile(r"\b(?:mlxlink|mstlink)\b.*?-d\s+(?P<dev>\S+)(?:.*?-p\s+(?P<port>\d+))?")


def command_target(command: str) -> tuple[str, str | None] | None:
    """The device and port an `mlxlink`/`mstlink` command line names (`-d <dev> [-p <port>]`), or None."""
    m = _COMMAND.search(command)
    return (m.group("dev"), m.group("port")) if m else None


def parse_mlxlink(text: str, source: str = "") -> Mlxlink:
    """Read mlxlink's text or `--json` output; never raises on odd lines."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        parsed = _from_json(stripped)
        if parsed is not None:
            return parsed
    out = Mlxlink()
    lines = text.splitlines()
    section = ""
    for number_, raw in enumerate(lines, start=1):
        line = raw[:MAX_LINE_CHARS].rstrip()
        text_ = line.strip()
        if not text_:
            continue
        if m := _COMMAND.search(text_):
            out.device, out.port = m.group("dev"), m.group("port")
            continue
        if _RULE.match(text_):
            continue
        nxt = lines[number_].strip() if number_ < len(lines) else ""
        if (_TITLE.match(text_) and ":" not in text_ and _RULE.match(nxt)) or text_ in KNOWN_SECTIONS:
            section = text_
            out.sections.setdefault(section, {})
            continue
        if _DIAGNOSTIC.match(text_):
            out.diagnostics.append(text_)
            continue
        m = _KEY_VALUE.match(text_)
        if m is None:
            out.unreadable.append((number_, text_))
            continue
        key = m.group("key").strip()
        out.sections.setdefault(section, {})
        if key not in out.sections[section]:
            out.sections[section][key] = m.group("value")
            out.lines[f"{section}/{key}"] = text_
    return out


def _flat(value: Any) -> str:
    if isinstance(value, dict):
        if "values" in value:
            inner = value["values"]
            shown = ",".join(str(v) for v in inner) if isinstance(inner, list) else str(inner)
            return f"{value.get('mask', '')} ({shown})".strip() if "mask" in value else shown
        return ", ".join(f"{k}={_flat(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ",".join(_flat(v) for v in value)
    return "" if value is None else str(value)


def _from_json(text: str) -> Mlxlink | None:
    try:
        data, _ = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    result = data.get("result") if isinstance(data.get("result"), dict) else data
    output = result.get("output") if isinstance(result, dict) else None
    if not isinstance(output, dict):
        return None
    out = Mlxlink(json=True)
    for title, values in output.items():
        if not isinstance(values, dict):
            continue
        section = out.sections.setdefault(str(title), {})
        for key, value in values.items():
            section[str(key)] = _flat(value)
            out.lines[f"{title}/{key}"] = f'"{key}": {json.dumps(value)[:200]}'
    status = result.get("status") if isinstance(result, dict) else None
    if isinstance(status, dict) and status.get("code") not in (None, 0):
        out.diagnostics.append(f"status {status.get('code')}: {status.get('message', '')}")
    return out
