"""The one exception tree.

Every error a person can cause or fix is a :class:`UserError` whose message names the problem and whose ``fix``
says what to do. The CLI prints those as one red line; ``--debug`` shows the traceback.
"""

from __future__ import annotations


class GpufleetError(Exception):
    """Base of every error gpufleet raises on purpose."""

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message} ({self.fix})" if self.fix else self.message


class UserError(GpufleetError):
    """Bad input: a manifest, a flag, a file. The person can fix it."""


class ManifestError(UserError):
    """A manifest or config file failed validation."""

    def __init__(self, path: str, message: str, *, fix: str | None = None) -> None:
        super().__init__(f"{path}: {message}", fix=fix)
        self.path = path


class ParseError(UserError):
    """Input text (a log, a trace, tool output) could not be read."""


class NotFoundError(UserError):
    """A named object (node, GPU, job, file) does not exist."""


class DependencyMissingError(UserError):
    """An optional dependency or external tool is not installed."""


class BackendError(GpufleetError):
    """An external system (NVML, Slurm, Kubernetes, Prometheus) failed or refused."""


class AuthError(UserError):
    """A request lacked valid credentials."""


class ForbiddenError(UserError):
    """The request's credentials are valid but may not do this (an agent token pushing for another node)."""


class InternalError(GpufleetError):
    """A bug in gpufleet."""
