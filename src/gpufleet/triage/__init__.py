"""`gpufleet triage`: read what operators paste (kernel logs, nvidia-smi, dcgmi, NCCL logs, ...), tell which tool
printed it by its content, and judge it: healthy, degraded, faulty, or unknown when the input cannot say."""
