"""Service-level objectives of inference services: one definition read by the SLO alert rules (PromQL, for
Prometheus) and by the control plane's SLO detector, so both judge a service against the same numbers.

The defaults are the serving objectives operators start from: p99 under 2 s and p95 under 500 ms over 5 minutes,
time to first token under 300 ms, errors under 0.1 %, availability of 99.9 % over an hour, within a 30-day budget.
A percentile over too few requests is noise: below `min_requests_per_s` the service is said to have too little
traffic, and nothing is alerted.

The burn-rate windows are written here once too (`BURN_WINDOWS`), for the rules' alerts and the detector's status.
They are rows of the multiwindow, multi-burn-rate table of "The Site Reliability Workbook" (Google, 2018), chapter 5
"Alerting on SLOs", Table 5-8 "Recommended parameters for a 99.9% SLO alerting configuration": an alert fires when
both a long window and a short one (1/12 of it) burn the budget faster than the rate at which `budget_share` of a
30-day budget would be spent in the long window. The workbook's rows: 1 h / 5 min, burn rate 14.4 (2 % of the
budget), page; 6 h / 30 min, burn rate 6 (5 %), page; 3 days / 6 h, burn rate 1 (10 %), ticket. Here the first
pages and the second opens a ticket (its lower rate is a slower fire); the 3-day row is not used, since the SLO
detector would keep three days of every replica's counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True, slots=True)
class BurnWindow:
    """One row of the workbook's table: the long and the short window, and the share of the error budget that
    burning at the alert's rate spends over the long one."""

    name: str  # "page" or "ticket": what the alert on it does
    long_s: float
    short_s: float
    budget_share: float

    def threshold(self, budget_days: float) -> float:
        """The burn rate both windows must exceed: 14.4 for 2 % of a 30-day budget in an hour."""
        return round(self.budget_share * budget_days * 86400.0 / self.long_s, 6)


PAGE_WINDOW = BurnWindow("page", long_s=3600.0, short_s=300.0, budget_share=0.02)
TICKET_WINDOW = BurnWindow("ticket", long_s=21600.0, short_s=1800.0, budget_share=0.05)
BURN_WINDOWS = (PAGE_WINDOW, TICKET_WINDOW)  # fastest first


class Objectives(BaseModel):
    model_config = ConfigDict(extra="forbid")

    p99_s: float | None = Field(default=2.0, gt=0)  # request duration, 99th percentile
    p95_s: float | None = Field(default=0.5, gt=0)
    ttft_s: float | None = Field(default=0.3, gt=0)  # time to first token, judged at `ttft_quantile`
    ttft_quantile: float = Field(default=0.95, gt=0, lt=1)
    error_ratio: float | None = Field(default=0.001, gt=0, lt=1)  # failed requests / requests
    availability: float | None = Field(default=0.999, gt=0, lt=1)  # successful requests / requests, over the hour
    latency_window_s: float = Field(default=300.0, gt=0)  # the percentiles' window
    availability_window_s: float = Field(default=3600.0, gt=0)
    budget_window_days: float = Field(default=30.0, gt=0)  # the error budget the burn rates spend
    min_requests_per_s: float = Field(default=0.1, ge=0)  # under this, too little traffic to judge


class ServiceObjectives(Objectives):
    """One service's objectives (`model` is the `model` label its metrics carry); unset fields take the defaults."""

    model: str = Field(min_length=1)
    version: str | None = None  # only this version's series; every version when absent


class SloConfig(BaseModel):
    """Objectives for every service (`defaults`) and per service (`services`)."""

    model_config = ConfigDict(extra="forbid")

    defaults: Objectives = Objectives()
    services: list[ServiceObjectives] = []

    def for_service(self, model: str, version: str = "") -> Objectives:
        """The service's own objectives over the config's defaults (fields it leaves unset take those)."""
        for svc in self.services:
            if svc.model == model and svc.version in (None, version):
                own = svc.model_dump(exclude_unset=True, exclude={"model", "version"})
                return self.defaults.model_copy(update=own)
        return self.defaults
