"""How the CLI reaches a control plane: which server and which token (flag, environment, then what
`gpufleet config set` remembered in $GPUFLEET_HOME/config), and every API error as one clear message.

Order for the server: --server, $GPUFLEET_SERVER, the config's `server`, http://127.0.0.1:8470.
Order for the token: --token-file, $GPUFLEET_TOKEN, the config's `token-file`, $GPUFLEET_HOME/token.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from gpufleet.control.paths import DEFAULT_PORT, api_token, data_dir
from gpufleet.errors import AuthError, BackendError, ManifestError, NotFoundError, UserError
from gpufleet.private_files import write_private

CONFIG_KEYS = ("server", "token-file")


def config_path() -> Path:
    return data_dir() / "config"


def read_config() -> dict[str, str]:
    path = config_path()
    if not path.exists():
        return {}
    from gpufleet import yaml_input

    try:
        data = yaml_input.load(path.read_text(encoding="utf-8", errors="replace"), str(path)) or {}
    except ManifestError as exc:
        raise UserError(exc.message, fix="fix it, or remove it and use `gpufleet config set`") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a mapping", fix="remove it and use `gpufleet config set`")
    return {str(k): str(v) for k, v in data.items() if k in CONFIG_KEYS}


def write_config(values: dict[str, str]) -> Path:
    import yaml

    return write_private(config_path(), yaml.safe_dump(values, sort_keys=True))


class Api:
    """A control plane's API for the CLI."""

    def __init__(self, server: str | None = None, token_file: Path | None = None) -> None:
        config = read_config()
        self.server = (server or os.environ.get("GPUFLEET_SERVER") or config.get("server") or "").rstrip("/")
        self.server = self.server or f"http://127.0.0.1:{DEFAULT_PORT}"
        self.where = (
            "--server"
            if server
            else "$GPUFLEET_SERVER"
            if os.environ.get("GPUFLEET_SERVER")
            else "the config (gpufleet config view)"
            if config.get("server")
            else "the default"
        )
        self._token_file = token_file or (Path(config["token-file"]) if config.get("token-file") else None)

    def token(self) -> str | None:
        if self._token_file is not None:
            try:
                return self._token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise UserError(f"cannot read the token file {self._token_file}: {exc.strerror}") from None
        return api_token()

    def _headers(self) -> dict[str, str]:
        token = self.token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _verify(self) -> bool:
        """Check the server's certificate on https. A plain-http server has none (and no redirect is followed), so
        the CA bundle, a fifth of a short command's CPU, is not loaded for it."""
        return not self.server.startswith("http://")

    def _unreachable(self) -> BackendError:
        return BackendError(
            f"no control plane answers at {self.server} (from {self.where})",
            fix="start one with `gpufleet up`, or point at yours with --server URL, $GPUFLEET_SERVER or "
            "`gpufleet config set server URL`",
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            resp = httpx.request(
                method, f"{self.server}{path}", headers=self._headers(), timeout=30, verify=self._verify(), **kwargs
            )
        except httpx.HTTPError:
            raise self._unreachable() from None
        return self._answer(resp)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body)

    def _answer(self, resp: httpx.Response) -> Any:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.status_code < 400:
            return body
        error = body.get("error", resp.text) if isinstance(body, dict) else resp.text
        fix = body.get("fix") if isinstance(body, dict) else None
        if resp.status_code == 401:
            raise AuthError(
                f"{error} ({self.server})",
                fix="give a token: --token-file FILE, $GPUFLEET_TOKEN, or `gpufleet token create` on the control "
                "plane's host",
            )
        if resp.status_code == 403:
            raise AuthError(error, fix=fix)
        if resp.status_code == 404:
            raise NotFoundError(error, fix=fix)
        if resp.status_code < 500:
            raise UserError(error, fix=fix)
        raise BackendError(f"{self.server}: {error}", fix=fix)

    def stream(self) -> Iterator[tuple[str, Any]]:
        """(kind, data) frames of /api/v1/stream until interrupted."""
        try:
            with httpx.stream(
                "GET",
                f"{self.server}/api/v1/stream",
                headers=self._headers(),
                timeout=httpx.Timeout(10, read=60),
                verify=self._verify(),
            ) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    self._answer(resp)
                kind = ""
                for line in resp.iter_lines():
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: "):
                        yield kind, json.loads(line[6:])
        except httpx.HTTPError:
            raise self._unreachable() from None
