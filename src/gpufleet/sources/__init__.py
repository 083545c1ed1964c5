"""Live readers on a node: the code that touches the machine (a device library, sysfs, /proc, a socket, a tool run
under a timeout) and hands what it read to a parser or straight to the agent as typed records.

Only the agent, the command line and the twin import this package (an import-linter contract): the control plane
sees a node only through what its agent sends. Pure parsing lives in `gpufleet.parsers`.
"""
