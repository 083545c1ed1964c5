"""What nvidia-smi prints in place of a value it could not read, and what each one means.

Every nvidia-smi view reads its values through NVML. When a query fails, nvidia-smi prints NVML's error string
instead of the value: in square brackets in `-q`, `-q -x` and `--query-gpu` output on current drivers
(`[Not Supported]`, `[Unknown Error]`, `[GPU requires reset]`), bare on older ones (`Unknown Error`, `N/A`), and
`ERR!` in the cells of its default table and in `nvlink -s`. `N/A` is a value the GPU does not have, not a fault.

Sources:
- NVML's return codes and their meaning: `nvml.h` (`nvmlReturn_t`, as vendored by NVIDIA/go-nvml), notably
  NVML_ERROR_GPU_IS_LOST = 15 ("The GPU has fallen off the bus or has otherwise become inaccessible") and
  NVML_ERROR_RESET_REQUIRED = 16 ("The GPU requires a reset before it can be used again").
- The strings nvidia-smi prints for them, as seen in public captures: `[GPU requires reset]` and `[GPU is lost]`
  in `--query-gpu` and `-q` output (GPUs after Xid 79/119/154), `[Unknown Error]` and `[Not Supported]`/`[N/A]`
  in `--query-gpu` output, `ERR!` in the table's Name, Fan, Temp, Perf, Pwr, GPU-Util, ECC and MIG cells of a GPU
  whose GSP stopped answering (drivers 375 to 570), `Requested functionality has been deprecated` and
  `Insufficient Permissions` in `-q` output.
- The nvidia-smi man page (drivers 470 to 535): "N/A" marks a field the product does not support.
"""

from __future__ import annotations

from typing import Literal

Unreadable = Literal["not-available", "read-error", "reset-required", "gpu-lost"]

# NVML error strings (nvmlErrorString) and nvidia-smi's own markers, lower case, without brackets
_MEANING: dict[str, Unreadable] = {
    # not a fault: the product has no such value, or the caller may not read it
    "n/a": "not-available",
    "na": "not-available",
    "not supported": "not-available",  # NVML_ERROR_NOT_SUPPORTED
    "insufficient permissions": "not-available",  # NVML_ERROR_NO_PERMISSION
    "requested functionality has been deprecated": "not-available",  # NVML_ERROR_DEPRECATED
    "not found": "not-available",  # NVML_ERROR_NOT_FOUND
    "no data": "not-available",  # NVML_ERROR_NO_DATA
    "invalid argument": "not-available",  # NVML_ERROR_INVALID_ARGUMENT: the query does not apply
    "function not found": "not-available",  # NVML_ERROR_FUNCTION_NOT_FOUND: an older NVML
    # the tool could not read a value the GPU has: typically a GPU in trouble
    "err!": "read-error",  # the table's and nvlink -s's marker for any failed query
    "unknown error": "read-error",  # NVML_ERROR_UNKNOWN
    "timeout": "read-error",  # NVML_ERROR_TIMEOUT
    "corrupted inforom": "read-error",  # NVML_ERROR_CORRUPTED_INFOROM
    "insufficient external power": "read-error",  # NVML_ERROR_INSUFFICIENT_POWER
    "interrupt request issue": "read-error",  # NVML_ERROR_IRQ_ISSUE
    "driver not loaded": "read-error",  # NVML_ERROR_DRIVER_NOT_LOADED
    "uninitialized": "read-error",  # NVML_ERROR_UNINITIALIZED
    "insufficient memory": "read-error",  # NVML_ERROR_MEMORY
    "in use by another client": "read-error",  # NVML_ERROR_IN_USE
    "system is not ready": "read-error",  # NVML_ERROR_NOT_READY
    # the GPU itself is gone or needs a reset before anything can read it
    "gpu requires reset": "reset-required",  # NVML_ERROR_RESET_REQUIRED
    "gpu is lost": "gpu-lost",  # NVML_ERROR_GPU_IS_LOST
}

# words that stand in a value's place without being an NVML error (`Processes : None`, `Unknown` states)
_NOT_A_READING = {"", "none", "unknown"}

MEANS: dict[Unreadable, str] = {
    "not-available": "not available on this GPU",
    "read-error": "nvidia-smi could not read it",
    "reset-required": "the GPU needs a reset before it can be read",
    "gpu-lost": "the GPU has fallen off the bus or is otherwise unreachable",
}


def unreadable(text: str) -> Unreadable | None:
    """What a printed value means when it is not a reading; None when it is one (a number, a word, a state).

    Brackets are optional (older drivers print the bare string). An unknown bracketed string is an NVML error
    this list does not name yet, so it reads as a read error rather than as a value.
    """
    word = " ".join(text.split()).lower()
    if word in _NOT_A_READING:
        return "not-available"
    bracketed = word.startswith("[") and word.endswith("]") and len(word) > 2
    inner = word[1:-1].strip() if bracketed else word
    meaning = _MEANING.get(inner)
    if meaning is None and inner.endswith("."):
        meaning = _MEANING.get(inner.rstrip("."))
    if meaning is not None:
        return meaning
    if bracketed and inner.strip(". ") and not inner.startswith("..."):
        return "read-error"
    return None


def is_fault(kind: Unreadable | None) -> bool:
    """A value that is missing because something is wrong (not merely unsupported)."""
    return kind is not None and kind != "not-available"
