"""Write the field-by-field comparison with dcgm-exporter into docs/dcgm-exporter.md, below its marker line.

The table is generated, never edited by hand: dcgm-exporter's default counters file (the catalog's copy) against what
an NVIDIA node's gpufleet agent exports (the field catalog and its sources' declarations), as
`gpufleet telemetry fields --compare-dcgm-exporter` shows it. tests/telemetry/test_dcgm_compare.py fails until this
is run after a change to either side.

    .venv/bin/python scripts/dcgm_exporter_table.py
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.agent.fields import NVIDIA_AGENT, named
from gpufleet.cli.field_sources import all_sources
from gpufleet.telemetry.dcgm_compare import MARKER, compare, markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "dcgm-exporter.md"


def main() -> None:
    text = DOC.read_text()
    head = text.split(MARKER, 1)[0]
    DOC.write_text(head + MARKER + "\n\n" + markdown(compare(named(list(NVIDIA_AGENT)), all_sources())))
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
