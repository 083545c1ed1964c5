"""How the CLI reaches a control plane: which server and which token (flag, environment, then what
`gpufleet config set` remembered in $GPUFLEET_HOME/config), and every API error as one clear message.

Order for the server: --server, $GPUFLEET_SERVER, the config's `server`, http://127.0.0.1:8470.
Order for the token: --token-file, $GPUFLEET_TOKEN, the config's `token-file`, $GPUFLEET_HOME/token.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpufleet import __version__
from gpufleet.control.paths import DEFAULT_PORT, api_token, data_dir
from gpufleet.errors import AuthError, BackendError, ManifestError, NotFoundError, UserError
from gpufleet.private_files import write_private

CONFIG_KEYS = ("server", "token-file")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered, not followed: a control plane never sends one, and a token must not go elsewhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


# The standard library's HTTP client: a command makes one or two requests, and an HTTP library's import (and its
# CA bundle, loaded only here for https) would cost more CPU than the rest of a short command together.
_OPENER = urllib.request.build_opener(_NoRedirect)


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

    def _unreachable(self) -> BackendError:
        return BackendError(
            f"no control plane answers at {self.server} (from {self.where})",
            fix="start one with `gpufleet up`, or point at yours with --server URL, $GPUFLEET_SERVER or "
            "`gpufleet config set server URL`",
        )

    def _open(self, method: str, path: str, body: bytes | None, timeout: float) -> http.client.HTTPResponse:
        """One request; an HTTP error status comes back as the response, never as an exception."""
        headers = {**self._headers(), "User-Agent": f"gpufleet/{__version__}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(f"{self.server}{path}", data=body, headers=headers, method=method)
        try:
            response: http.client.HTTPResponse = _OPENER.open(request, timeout=timeout)
        except urllib.error.HTTPError as exc:  # 3xx (never followed), 4xx, 5xx: the answer, with its body
            return exc  # type: ignore[return-value]  # an HTTPError is a response (status, read, headers)
        except (OSError, http.client.HTTPException, ValueError):  # refused, reset, timed out, not HTTP, bad URL
            raise self._unreachable() from None
        return response

    def request(self, method: str, path: str, body: bytes | None = None) -> Any:
        with self._open(method, path, body, timeout=30) as response:
            try:
                raw = response.read()
            except (OSError, http.client.HTTPException):
                raise self._unreachable() from None
            return self._answer(response.status, raw)

    def get(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None}, doseq=True)
        return self.request("GET", f"{path}?{query}" if query else path)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, None if body is None else json.dumps(body).encode())

    def _answer(self, status: int, raw: bytes) -> Any:
        text = raw.decode("utf-8", errors="replace")
        try:
            body = json.loads(text) if text.strip() else None
        except ValueError:
            body = None
        if status < 400:
            return body
        error = body.get("error", text) if isinstance(body, dict) else text
        fix = body.get("fix") if isinstance(body, dict) else None
        if status == 401:
            raise AuthError(
                f"{error} ({self.server})",
                fix="give a token: --token-file FILE, $GPUFLEET_TOKEN, or `gpufleet token create` on the control "
                "plane's host",
            )
        if status == 403:
            raise AuthError(error, fix=fix)
        if status == 404:
            raise NotFoundError(error, fix=fix)
        if status < 500:
            raise UserError(error, fix=fix)
        raise BackendError(f"{self.server}: {error}", fix=fix)

    def stream(self) -> Iterator[tuple[str, Any]]:
        """(kind, data) frames of /api/v1/stream until interrupted."""
        with self._open("GET", "/api/v1/stream", None, timeout=60) as response:
            if response.status >= 400:
                self._answer(response.status, response.read())
            kind = ""
            try:
                for raw in response:
                    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: "):
                        yield kind, json.loads(line[6:])
            except (OSError, http.client.HTTPException):
                raise self._unreachable() from None
