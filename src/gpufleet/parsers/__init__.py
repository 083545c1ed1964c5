"""Pure readers of tools' output: text or bytes in, typed records out, no I/O.

Each parser is grounded in its tool's own source or documentation (named in its docstring) and tested on real
captures. A parser imports only `gpufleet.model`, `gpufleet.catalog` and `gpufleet.errors`; running the tool, reading
a device or following a file is a live source's work (`gpufleet.sources`), and judging what was read is health's.
"""
