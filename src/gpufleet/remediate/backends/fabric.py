"""Switch-port isolation through the real tools: `ibportstate LID PORT disable` from a host on the subnet (the
control plane's, when the operator allows it with `gpufleet server --fabric-isolation ibportstate`). The engine
asks for it only after the same budget, rate-limit and breaker checks as any action, and audits the result."""

from __future__ import annotations

import shutil
import subprocess

from gpufleet.errors import BackendError
from gpufleet.remediate.backends.base import IsolatesFabricPorts


class IbPortState(IsolatesFabricPorts):
    name = "ibportstate"

    def __init__(
        self,
        ca: str | None = None,
        port: int | None = None,
        *,
        timeout_s: float = 30.0,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.ca, self.port, self.timeout_s, self.env, self.cwd = ca, port, timeout_s, env, cwd

    def set_switch_port(self, switch: str, port: int, lid: int | None, *, enable: bool) -> str:
        if lid is None or lid <= 0:
            raise BackendError(
                f"switch {switch} has no LID in the discovered fabric",
                fix="check the subnet manager assigned LIDs (`ibswitches`), then retry",
            )
        if shutil.which("ibportstate", path=(self.env or {}).get("PATH")) is None:
            raise BackendError(
                "ibportstate is not installed", fix="install infiniband-diags on the control plane's host"
            )
        local = (["-C", self.ca] if self.ca else []) + (["-P", str(self.port)] if self.port else [])
        verb = "enable" if enable else "disable"
        argv = ["ibportstate", *local, str(lid), str(port), verb]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, errors="replace", timeout=self.timeout_s, env=self.env,
                cwd=self.cwd, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise BackendError(
                f"`{' '.join(argv)}` did not finish in {self.timeout_s:g} s",
                fix="check the subnet manager and the path to the switch; isolate the port in the switch's CLI",
            ) from None
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip()).splitlines()
            raise BackendError(
                f"`{' '.join(argv)}` failed (exit {done.returncode}): {last[-1][:200] if last else 'no output'}",
                fix="check the M_Key and that this host may manage the switch; isolate the port in the switch's CLI",
            )
        return f"switch {switch} (lid {lid}) port {port} {'enabled' if enable else 'disabled (isolated)'}"
