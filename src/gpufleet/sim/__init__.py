"""The digital twin: a simulated GPU cluster that behaves like real hardware, with fault injection."""

from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.twin import Twin

__all__ = ["InjectedFault", "Twin"]
