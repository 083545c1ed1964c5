"""A fake `ipmitool` executable on PATH: it prints a recorded real output for `sdr elist` and `sel elist` (files named
in the environment, so a test can change what the BMC says between reads), or fails the way ipmitool fails."""

from __future__ import annotations

import os
from pathlib import Path

SCRIPT = """#!/bin/sh
case "$1 $2" in
  "sdr elist") f="$FAKE_IPMI_SDR" ;;
  "sel elist") f="$FAKE_IPMI_SEL" ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
if [ -n "$FAKE_IPMI_FAIL" ]; then echo "$FAKE_IPMI_FAIL" >&2; exit 1; fi
if [ -n "$FAKE_IPMI_SLEEP" ]; then sleep "$FAKE_IPMI_SLEEP"; fi
if [ -s "$f" ]; then cat "$f"; else echo "SEL has no entries" >&2; fi
"""


def install(directory: Path, sdr: Path, sel: Path, **extra: str) -> dict[str, str]:
    """Write the fake into `directory` and return the environment that puts it first on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "ipmitool"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    env = {"PATH": f"{directory}:/usr/bin:/bin", "FAKE_IPMI_SDR": str(sdr), "FAKE_IPMI_SEL": str(sel)}
    env.update(extra)
    return {**{k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL")}, **env}
