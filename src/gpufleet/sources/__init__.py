"""Readers of the real world: each module turns one tool's raw output into plain records.

Parsers here are pure functions of text (no I/O), so every one is tested on captured real output. The few
functions that do touch the machine (running `dmesg`, following `/dev/kmsg`) are kept apart from the parsing
and say so in their names.
"""
