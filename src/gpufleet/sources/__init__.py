"""Readers of the real world (NVML, nvidia-smi, the kernel log, IB diagnostics, schedulers) and the twin.

Parsers here are pure functions of text (no I/O), so every one is tested on captured real output. The few
functions that do touch the machine (running `dmesg`, following `/dev/kmsg`, calling NVML) are kept apart from
the parsing and say so in their names.
"""
