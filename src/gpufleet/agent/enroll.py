"""The token an agent pushes with: its node's own, once it has one.

A DaemonSet gives every node's agent the same agent token; node actions (a GPU reset, a reboot) go only to an agent
whose token is bound to its node (control/node_actions.py). So an agent started with a shared agent token asks the
control plane once for a token bound to its node (`POST /api/v1/agents/enroll`; the first to ask for a node gets
it), keeps it in its data directory (0600) and pushes with it from then on. A node that already has a token of its
own gets no second: its agent kept the first, or a person revokes it so the node can enroll again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from gpufleet.private_files import write_private

log = logging.getLogger("gpufleet.agent")

RETRY_S = 60.0  # after a control plane that did not answer


class NodeToken:
    """Callable as the pusher's token source: the node's own token when there is one, else the given token (and
    an enrollment tried with it, at most once a minute while the control plane does not answer)."""

    def __init__(
        self,
        path: Path,
        given: Callable[[], str | None],
        control_plane: str,
        node: str,
        *,
        enroll: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.given = given
        self.url = control_plane.rstrip("/") + "/api/v1/agents/enroll"
        self.node = node
        self.enroll = enroll
        self.clock = clock
        self._next_try = 0.0
        self.said = ""  # why enrollment stopped, once said

    def own(self) -> str | None:
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return text or None

    def __call__(self) -> str | None:
        own = self.own()
        if own is not None:
            return own
        given = self.given()
        if given and self.enroll and self.clock() >= self._next_try:
            own = self._enroll(given)
            if own is not None:
                return own
        return given

    def _enroll(self, given: str) -> str | None:
        try:
            resp = httpx.post(
                self.url, json={"node": self.node}, headers={"Authorization": f"Bearer {given}"}, timeout=10.0
            )
        except httpx.HTTPError as exc:
            self._next_try = self.clock() + RETRY_S
            log.info("enrollment of %s not done yet: %s unreachable (%s)", self.node, self.url, type(exc).__name__)
            return None
        if resp.status_code == 200:
            token = str(resp.json()["token"])
            write_private(self.path, token + "\n")
            log.info("%s enrolled: its own agent token is kept in %s", self.node, self.path)
            return token
        self.enroll = False  # a refusal stands until someone changes something; the given token goes on pushing
        try:
            body = resp.json()
            why = f"{body.get('error', '')} ({body.get('fix', '')})"
        except ValueError:
            why = resp.text[:300]
        level = logging.WARNING if resp.status_code == 403 else logging.INFO
        self.said = why
        log.log(
            level, "%s not enrolled (%d): %s; node actions need a token bound to it", self.node, resp.status_code, why
        )
        return None
