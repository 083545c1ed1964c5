"""Port counters: one call carrying a whole tick of every job's traffic counts as the calls per job it replaced."""

from __future__ import annotations

import copy

import numpy as np

from gpufleet.sim.fabric_state import MTU_BYTES, PortArrays
from tests.twins import small_twin


def per_job(ports: PortArrays, port_idx: np.ndarray, bytes_out: np.ndarray) -> None:
    """The per-job call it replaced: `port_idx` without repeats, plain fancy-index adds."""
    up = ports.up[port_idx]
    sent = np.where(up, bytes_out, 0).astype(np.int64)
    pkts = sent // MTU_BYTES
    peer = ports.peer[port_idx]
    c = ports.counters
    for side in (port_idx, peer):
        c["xmit_bytes"][side] += sent
        c["rcv_bytes"][side] += sent
        c["xmit_pkts"][side] += pkts
        c["rcv_pkts"][side] += pkts
    dropped = np.where(~up, bytes_out // MTU_BYTES, 0).astype(np.int64)
    if dropped.any():
        c["xmit_discards"][peer] += dropped


def test_one_call_for_all_jobs_counts_as_one_call_per_job() -> None:
    twin = small_twin(nodes=3, job_nodes=0)
    hca = [twin.port_of(f"n-{n:03d}", r) for n in range(3) for r in range(8)]
    # three jobs; the second shares the first's ports (two jobs on the same nodes' NICs); one link down
    jobs = [np.array(hca[:16]), np.array(hca[8:16]), np.array(hca[16:])]
    sizes = [3_000_001, 123_457, 9_999]
    twin.set_link(hca[10], "n-001", 2, up=False)
    one, many = twin.ports, copy.deepcopy(twin.ports)
    for idx, size in zip(jobs, sizes, strict=True):
        per_job(one, idx, np.full(idx.size, size, dtype=np.int64))
    many.add_traffic(np.concatenate(jobs), np.repeat(np.array(sizes, dtype=np.int64), [j.size for j in jobs]))
    for name, counts in one.counters.items():
        np.testing.assert_array_equal(many.counters[name], counts, err_msg=name)
    shared, leaf = hca[9], int(one.peer[hca[9]])
    assert one.counters["xmit_bytes"][shared] == one.counters["rcv_bytes"][leaf] == 3_000_001 + 123_457
    assert many.counters["xmit_discards"][int(one.peer[hca[10]])] == 3_000_001 // MTU_BYTES + 123_457 // MTU_BYTES


def test_no_traffic_counts_nothing() -> None:
    ports = small_twin(nodes=2, job_nodes=0).ports
    before = {k: v.copy() for k, v in ports.counters.items()}
    ports.add_traffic(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert all((ports.counters[k] == v).all() for k, v in before.items())
