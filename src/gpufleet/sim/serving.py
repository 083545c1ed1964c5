"""Inference services on the twin: requests arrive, queue when they outrun the service's capacity, and are served
with a time to first token and a gap between tokens that follow the GPUs' clocks, the load and any fault.

A service serves `capacity_per_gpu` requests/s per GPU at full clocks; a throttled GPU serves fewer. Offered load
beyond capacity builds a queue (its wait adds to time to first token and duration), and past `MAX_QUEUE_S` of work
new requests are turned away at once, as a server's admission control does: they count as errors. Batching makes
each token a little slower as the service fills up.

Each service's latencies come from its own profile: a large sample of requests drawn once (tokens generated, time
to first token and gap between tokens, at unit slowdown). A tick scales the profile by the current slowdown and
shifts it by the queue's wait, and its requests fall into the histograms' buckets by one multinomial draw on that
distribution: the same histograms as drawing every request, at a cost that does not grow with the request rate.
Histograms count requests as they arrive, with the latency each will see.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from gpufleet.instrument import names
from gpufleet.model import InferenceService
from gpufleet.sim.gpu_state import GpuArrays

DURATION_BOUNDS = np.array(names.REQUEST_DURATION_BUCKETS)
TTFT_BOUNDS = np.array(names.TIME_TO_FIRST_TOKEN_BUCKETS)
ITL_BOUNDS = np.array(names.INTER_TOKEN_LATENCY_BUCKETS)

TTFT_SHARE = 0.25  # of an unloaded request's mean duration: the prefill; the rest is spent generating tokens
TTFT_SIGMA = 0.3  # log-normal spread of time to first token (prompt lengths differ)
ITL_SIGMA = 0.2  # of a request's mean gap between tokens
TOKENS_SHAPE = 2.0  # gamma shape of generated tokens per request: most short, a tail of long answers
BATCH_SLOWDOWN = 0.5  # a full batch makes each token this much slower than a lone request
MAX_QUEUE_S = 30.0  # work queued beyond this many seconds of capacity is turned away
FAIL_FAST_S = 0.005  # how long a refused or failed-at-once request takes
IDLE_UTIL, BUSY_UTIL = 10.0, 95.0  # GPU utilization of a loaded-but-idle and of a saturated server
PROFILE_SIZE = 4096


@dataclass(slots=True)
class Counts:
    """One histogram's per-bucket (not cumulative) counts, the last bucket above every bound, and its sum."""

    bounds: np.ndarray
    buckets: np.ndarray = field(init=False)
    sum: float = 0.0

    def __post_init__(self) -> None:
        self.buckets = np.zeros(self.bounds.size + 1, np.int64)

    @property
    def count(self) -> int:
        return int(self.buckets.sum())


@dataclass(slots=True)
class LatencyProfile:
    """A service's requests at unit slowdown and no queue: sorted, so a quantile is a binary search."""

    duration: np.ndarray  # request durations
    ttft: np.ndarray  # times to first token
    itl: np.ndarray  # each request's gap between tokens, sorted ...
    gaps_below: np.ndarray  # ... with the count of gaps at or below each (cumulative), 0 first
    mean_duration: float
    mean_ttft: float
    mean_itl: float  # over gaps, not requests
    mean_gaps: float  # gaps between tokens per request: tokens - 1

    @classmethod
    def of(cls, svc: InferenceService) -> LatencyProfile:
        rng = np.random.default_rng(zlib.crc32(f"{svc.name}/{svc.version}".encode()))
        tokens = np.ceil(rng.gamma(TOKENS_SHAPE, svc.tokens_per_request / TOKENS_SHAPE, PROFILE_SIZE))
        z = rng.standard_normal((2, PROFILE_SIZE))
        ttft_mean = TTFT_SHARE * svc.base_latency_s
        itl_mean = (svc.base_latency_s - ttft_mean) / max(svc.tokens_per_request - 1.0, 1.0)
        # exp(sigma z - sigma^2 / 2) has mean 1: the spreads keep the means
        ttft = ttft_mean * np.exp(TTFT_SIGMA * z[0] - TTFT_SIGMA**2 / 2)
        itl = itl_mean * np.exp(ITL_SIGMA * z[1] - ITL_SIGMA**2 / 2)
        gaps = tokens - 1.0
        duration = ttft + gaps * itl
        order = np.argsort(itl)
        return cls(
            np.sort(duration),
            np.sort(ttft),
            itl[order],
            np.concatenate([[0.0], np.cumsum(gaps[order])]),
            float(duration.mean()),
            float(ttft.mean()),
            float(np.dot(itl, gaps) / max(gaps.sum(), 1.0)),
            float(gaps.mean()),
        )


@dataclass(slots=True)
class ServiceState:
    service: InferenceService
    gpus: np.ndarray
    profile: LatencyProfile = field(init=False)
    duration: Counts = field(default_factory=lambda: Counts(DURATION_BOUNDS))
    ttft: Counts = field(default_factory=lambda: Counts(TTFT_BOUNDS))
    inter_token: Counts = field(default_factory=lambda: Counts(ITL_BOUNDS))
    requests: int = 0
    errors: int = 0
    tokens: int = 0
    queue: float = 0.0  # requests waiting to start
    in_flight: float = 0.0  # requests being served (Little's law over the last tick)
    # faults
    latency_factor: float = 1.0
    error_fraction: float = 0.0
    ramp: tuple[float, float, float] | None = None  # (start, duration, peak multiplier) of a traffic ramp
    down: bool = False  # the server is not running: no requests served, no series
    _shares: tuple[tuple[float, float], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    def __post_init__(self) -> None:
        self.profile = LatencyProfile.of(self.service)

    def bucket_shares(self, slow: float, wait: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each histogram's share of requests per bucket at this slowdown and wait (kept while they hold)."""
        if self._shares is None or self._shares[0] != (slow, wait):
            p = self.profile
            self._shares = (
                (slow, wait),
                (
                    _shares(DURATION_BOUNDS, p.duration, slow, wait),
                    _shares(TTFT_BOUNDS, p.ttft, slow, wait),
                    _shares(ITL_BOUNDS, p.itl, slow, 0.0, p.gaps_below),
                ),
            )
        return self._shares[1]

    def rate_multiplier(self, now: float) -> float:
        if self.ramp is None:
            return 1.0
        start, duration, peak = self.ramp
        return 1.0 + (peak - 1.0) * min(1.0, max(0.0, (now - start) / max(duration, 1e-9)))

    def restart(self) -> None:
        """A new server process: its counters begin again, its queue is gone."""
        self.duration, self.ttft, self.inter_token = Counts(DURATION_BOUNDS), Counts(TTFT_BOUNDS), Counts(ITL_BOUNDS)
        self.requests = self.errors = self.tokens = 0
        self.queue = self.in_flight = 0.0


def step_inference(
    services: list[ServiceState], gpus: GpuArrays, now: float, dt: float, rng: np.random.Generator
) -> None:
    for st in services:
        idx = st.gpus
        gpus.allocated[idx] = True
        if st.down:  # the pod holds its GPUs while its server is gone
            gpus.demand_util[idx] = 0.0
            gpus.demand_fb_mib[idx] = 0.0
            continue
        gpus.demand_fb_mib[idx] = gpus.memory_mib[idx] * 0.6
        _serve(st, gpus, now, dt, rng)


def _serve(st: ServiceState, gpus: GpuArrays, now: float, dt: float, rng: np.random.Generator) -> None:
    svc, idx, profile = st.service, st.gpus, st.profile
    rate = svc.requests_per_s * st.rate_multiplier(now)
    n = int(rng.poisson(rate * dt))
    if not gpus.alive[idx].all():  # a lost GPU: every request fails at once
        gpus.demand_util[idx] = 0.0
        st.queue = st.in_flight = 0.0
        _refuse(st, n)
        return
    ratio = max(float((gpus.sm_clock[idx] / gpus.max_clock[idx]).min()), 0.05)
    capacity = svc.capacity_per_gpu * idx.size * ratio
    backlog = st.queue + n
    served = min(backlog, capacity * dt)
    queue = backlog - served
    refused = int(max(0.0, queue - capacity * MAX_QUEUE_S))
    st.queue = queue - refused
    load = min(1.0, rate / capacity)  # the offered load, not this tick's draw: latencies move with traffic
    gpus.demand_util[idx] = min(BUSY_UTIL, IDLE_UTIL + (BUSY_UTIL - IDLE_UTIL) * served / (capacity * dt))
    _refuse(st, refused)
    accepted = n - refused
    slow = st.latency_factor / ratio * (1.0 + BATCH_SLOWDOWN * load * load)
    st.in_flight = served / dt * slow * profile.mean_duration  # Little's law
    if accepted <= 0:
        return
    wait = st.queue / capacity
    duration, ttft, itl = st.bucket_shares(slow, wait)
    gaps = int(rng.poisson(accepted * profile.mean_gaps))
    st.duration.buckets += rng.multinomial(accepted, duration)
    st.ttft.buckets += rng.multinomial(accepted, ttft)
    st.inter_token.buckets += rng.multinomial(gaps, itl)
    st.duration.sum += accepted * (slow * profile.mean_duration + wait)
    st.ttft.sum += accepted * (slow * profile.mean_ttft + wait)
    st.inter_token.sum += gaps * slow * profile.mean_itl
    errors = int(rng.binomial(accepted, st.error_fraction)) if st.error_fraction > 0 else 0
    st.requests += accepted
    st.errors += errors
    st.tokens += round((gaps + accepted) * (accepted - errors) / accepted)


def _shares(
    bounds: np.ndarray, profile: np.ndarray, slow: float, wait: float, below: np.ndarray | None = None
) -> np.ndarray:
    """The share of `slow * profile + wait` in each bucket (of the weight, with `below`: the sorted profile's
    cumulative weights)."""
    at = profile.searchsorted((bounds - wait) / slow, side="right")  # profile entries <= each bound
    cumulative = np.empty(at.size + 2)
    cumulative[0] = 0.0
    cumulative[1:-1] = at if below is None else below[at]
    cumulative[-1] = profile.size if below is None else below[-1]
    return (cumulative[1:] - cumulative[:-1]) / max(cumulative[-1], 1.0)


def _refuse(st: ServiceState, n: int) -> None:
    if n <= 0:
        return
    st.requests += n
    st.errors += n
    st.duration.buckets[np.searchsorted(st.duration.bounds, FAIL_FAST_S)] += n
    st.duration.sum += n * FAIL_FAST_S
