"""One reader per format: cleaned lines in, a judged `TriageReport` out. Each reuses the parser the rest of gpufleet
runs on the same tool's output (the agent's kernel-log parser and Xid policy, the nvidia-smi and dcgmi parsers,
NCCL diagnosis), so triage and the fleet agree about what a line means. Which reader judges which format is said
once, in the format registry (`gpufleet.triage.formats`), whose `read` judges lines as a named format."""
