"""Running the infiniband-diags tools on a host attached to the fabric, each under a timeout.

A subnet is reached through one local HCA port (`-C mlx5_0 -P 1`); a host on several subnets runs one
`FabricTools` per subnet. A tool that hangs (a subnet manager that stops answering, a port that times out every
MAD) is killed at its timeout and reported as such; a missing tool is one clear error naming the package.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field

from gpufleet.errors import UserError
from gpufleet.fabric.discover import add_link_states, from_ibnetdiscover
from gpufleet.fabric.graph import FabricGraph
from gpufleet.parsers.infiniband.diags import (
    QueryErrorsReport,
    parse_ibnetdiscover,
    scan_iblinkinfo,
)
from gpufleet.parsers.infiniband.diags import parse_ibqueryerrors as _parse_qe

DEFAULT_TIMEOUT_S = 60.0
PACKAGE = "infiniband-diags"


class FabricToolError(UserError):
    """A diag tool that is missing, failed, or did not finish in time."""


@dataclass(slots=True)
class ToolRun:
    argv: list[str]
    stdout: str
    stderr: str
    returncode: int
    seconds: float


def local_port(text: str) -> tuple[str, int]:
    """(CA, port) from `--fabric-subnet CA[:PORT]` (port 1 when not given)."""
    ca, _, port = text.partition(":")
    if not ca or (port and not port.isdigit()):
        raise UserError(f"--fabric-subnet {text!r} is not CA:PORT", fix="e.g. --fabric-subnet mlx5_0:1")
    return ca, int(port) if port else 1


@dataclass
class FabricTools:
    """The tools of one subnet. `env` and `cwd` are for the tools' environment (a simulated fabric reaches them
    through an LD_PRELOADed umad library that writes into the working directory)."""

    ca: str | None = None
    port: int | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    env: dict[str, str] | None = None
    cwd: str | None = None
    runs: list[ToolRun] = field(default_factory=list)

    @property
    def subnet(self) -> str:
        """How this subnet is named: the local port it is reached through."""
        if self.ca is None:
            return "default"
        return f"{self.ca}/{self.port or 1}"

    def _local(self) -> list[str]:
        out: list[str] = []
        if self.ca is not None:
            out += ["-C", self.ca]
        if self.port is not None:
            out += ["-P", str(self.port)]
        return out

    def run(self, tool: str, *args: str, ok_codes: tuple[int, ...] = (0,)) -> ToolRun:
        if shutil.which(tool, path=(self.env or {}).get("PATH")) is None:
            raise FabricToolError(
                f"{tool} is not installed",
                fix=f"install {PACKAGE} (apt install {PACKAGE}, or rdma-core's infiniband-diags package)",
            )
        argv = [tool, *self._local(), *args]
        started = time.monotonic()
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.timeout_s,
                env=self.env,
                cwd=self.cwd,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise FabricToolError(
                f"`{' '.join(argv)}` did not finish in {self.timeout_s:g} s and was stopped",
                fix="check that a subnet manager is running (`sminfo`) and the local port is Active (`ibstat`); "
                "a larger fabric may need a longer --tool-timeout",
            ) from None
        except OSError as exc:
            raise FabricToolError(f"cannot run {tool}: {exc}", fix=f"check the {PACKAGE} installation") from None
        run = ToolRun(argv, done.stdout, done.stderr, done.returncode, time.monotonic() - started)
        self.runs.append(run)
        if done.returncode not in ok_codes:
            detail = (done.stderr.strip() or done.stdout.strip()).splitlines()
            raise FabricToolError(
                f"`{' '.join(argv)}` failed (exit {done.returncode}): {detail[-1][:200] if detail else 'no output'}",
                fix="check the local HCA port (`ibstat`) and the subnet manager (`sminfo`); run the command by hand",
            )
        return run

    def discover(self) -> FabricGraph:
        """ibnetdiscover's topology, with iblinkinfo's port states and hints on top."""
        topology = parse_ibnetdiscover(self.run("ibnetdiscover").stdout, source="ibnetdiscover")
        graph = from_ibnetdiscover(topology, source="live")
        linkinfo = scan_iblinkinfo(self.run("iblinkinfo").stdout)
        add_link_states(graph, linkinfo.links)
        return graph

    def query_errors(self) -> QueryErrorsReport:
        """Every port's error counters (ibqueryerrors exits 1 when it found errors, which is a result, not a
        failure); `--data` adds the traffic counters."""
        return _parse_qe(self.run("ibqueryerrors", "--data", ok_codes=(0, 1)).stdout, source="ibqueryerrors")

    def set_port(self, lid: int, port: int, action: str) -> str:
        """`ibportstate LID PORT disable|enable|reset`: isolation of a switch port, and its return."""
        if action not in ("disable", "enable", "reset"):
            raise UserError(f"unknown port action {action!r}", fix="use disable, enable or reset")
        return self.run("ibportstate", str(lid), str(port), action).stdout
