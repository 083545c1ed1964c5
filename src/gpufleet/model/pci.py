"""PCI addresses as drivers and tools print them, normalised to one spelling."""

from __future__ import annotations

import re
from functools import lru_cache

# domain (4-8 hex digits, sometimes absent), bus, device, optional function
_PCI = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?$"
)


@lru_cache(maxsize=4096)  # a log names its few GPUs over and over
def normalise_pci(text: str) -> str | None:
    """`00000000:3B:00.0`, `0000:3b:00`, `3b:00.0` -> `0000:3b:00` (domain:bus:device, lower case, no
    function).

    The kernel log names a GPU by domain:bus:device; nvidia-smi adds an 8-digit domain and the function.
    Keying both on this form lets a kernel event be joined to an nvidia-smi record. Returns None for text that
    is not a PCI address.
    """
    match = _PCI.match(text.strip())
    if match is None:
        return None
    domain = int(match.group("domain") or "0", 16)
    if domain > 0xFFFF:
        return None
    bus = int(match.group("bus"), 16)
    dev = int(match.group("dev"), 16)
    return f"{domain:04x}:{bus:02x}:{dev:02x}"
