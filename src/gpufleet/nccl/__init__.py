"""NCCL: predicted collective performance, measured-vs-expected comparison, environment advice, log diagnosis.

Public entry points for other parts of gpufleet:

- :func:`allreduce_time_s` -- fast, cached AllReduce time for the digital twin.
- :func:`predict_sweep` / :func:`predict_one` -- full per-size predictions.
- :func:`compare_to_findings` -- turn a ``compare`` result into findings for the health pipeline.
"""

from __future__ import annotations

from gpufleet.nccl.api import allreduce_time_s, collective_time_s
from gpufleet.nccl.compare import CollectiveFinding, CompareResult, compare_table, compare_to_findings
from gpufleet.nccl.predict import Prediction, predict_one, predict_sweep
from gpufleet.nccl.topology import Topology

__all__ = [
    "CollectiveFinding",
    "CompareResult",
    "Prediction",
    "Topology",
    "allreduce_time_s",
    "collective_time_s",
    "compare_table",
    "compare_to_findings",
    "predict_one",
    "predict_sweep",
]
