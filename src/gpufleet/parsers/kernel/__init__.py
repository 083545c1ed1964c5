"""Kernel-log lines: NVIDIA (Xid, SXid, NVRM), amdgpu and habanalabs reports, and the framing of pasted logs."""
