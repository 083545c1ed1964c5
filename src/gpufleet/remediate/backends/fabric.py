"""Switch-port isolation through the real tools: `ibportstate LID PORT disable` from a host on the subnet (the
control plane's, when the operator allows it with `gpufleet server --fabric-isolation ibportstate`). The engine
asks for it only after the same budget, rate-limit and breaker checks as any action, and audits the result."""

from __future__ import annotations

from gpufleet.errors import BackendError
from gpufleet.remediate.backends.base import IsolatesFabricPorts
from gpufleet.sources.infiniband.diag_tools import FabricToolError, FabricTools


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
        self.tools = FabricTools(ca=ca, port=port, timeout_s=timeout_s, env=env, cwd=cwd)

    def set_switch_port(self, switch: str, port: int, lid: int | None, *, enable: bool) -> str:
        if lid is None or lid <= 0:
            raise BackendError(
                f"switch {switch} has no LID in the discovered fabric",
                fix="check the subnet manager assigned LIDs (`ibswitches`), then retry",
            )
        try:
            self.tools.set_port(lid, port, "enable" if enable else "disable")
        except FabricToolError as exc:  # an action that failed, to the engine: the backend's error
            raise BackendError(
                exc.message,
                fix=f"{exc.fix}; check the M_Key and that this host may manage the switch, or isolate the port in "
                "the switch's CLI",
            ) from None
        return f"switch {switch} (lid {lid}) port {port} {'enabled' if enable else 'disabled (isolated)'}"
