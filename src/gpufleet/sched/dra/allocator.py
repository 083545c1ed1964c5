"""Allocate a ResourceClaim from ResourceSlices, as the scheduler's structured-parameters allocator does.

For each request (`exactly`, or the first `firstAvailable` alternative that works) the allocator picks devices
that match the DeviceClass selectors and the request selectors (CEL), are not allocated already, tolerate the
device taints and have the requested capacity; `allocationMode: All` takes every matching device. Constraints
(`matchAttribute`, `distinctAttribute`) are honoured by backtracking. All devices of a claim come from one node
(node-local slices) or from slices usable on every node. The result is written to `status.allocation`. A claim that
asks for the devices of a vendor without a DRA driver (Intel Gaudi) is told so, and what to request instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

from celpy import celtypes

from gpufleet.errors import UserError
from gpufleet.sched.dra.cel import Quantity, attribute_value, compile_selector, device_input
from gpufleet.sched.dra.objects import (
    AllocationResult,
    Device,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceClass,
    DeviceConstraint,
    DeviceRequestAllocationResult,
    DeviceToleration,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ResourceClaim,
    ResourceClaimConsumerReference,
    ResourceClaimStatus,
    ResourceSlice,
    _RequestBody,
)
from gpufleet.sched.dra.vendors import driverless_vendor, no_driver_error
from gpufleet.sched.partition.mig import MigPlacement, completions, geometry_of

MAX_STEPS = 200_000  # backtracking budget: a claim that needs more search than this is reported, not hung on

DeviceKey = tuple[str, str, str]  # driver, pool, device
CounterKey = tuple[str, str, str, str]  # driver, pool, counter set, counter


@dataclass(frozen=True)
class PoolDevice:
    """A published device with the driver, pool and node it belongs to."""

    driver: str
    pool: str
    node: str | None  # None: usable from every node
    device: Device

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.device.name)

    def _split(self, qualified: str) -> tuple[str, str]:
        domain, _, name = qualified.rpartition("/")
        return (domain or self.driver), name

    @cached_property
    def attributes(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for qualified, attr in (self.device.attributes or {}).items():
            domain, name = self._split(qualified)
            kind, value = next((k, v) for k, v in attr.model_dump(by_alias=True).items() if v is not None)
            out.setdefault(domain, {})[name] = attribute_value(kind, value)
        return out

    @cached_property
    def capacity(self) -> dict[str, dict[str, Quantity]]:
        out: dict[str, dict[str, Quantity]] = {}
        for qualified, cap in (self.device.capacity or {}).items():
            domain, name = self._split(qualified)
            out.setdefault(domain, {})[name] = Quantity(cap.value)
        return out

    @cached_property
    def cel(self) -> celtypes.MapType:
        return device_input(self.driver, self.attributes, self.capacity, bool(self.device.allow_multiple_allocations))

    @cached_property
    def consumption(self) -> dict[CounterKey, Fraction]:
        return {
            (self.driver, self.pool, use.counter_set, name): Quantity(c.value).value
            for use in self.device.consumes_counters or []
            for name, c in use.counters.items()
        }

    @cached_property
    def mig_placement(self) -> tuple[str, tuple[str, str, str], MigPlacement] | None:
        """For a partitionable MIG device: its geometry, the counter set of its GPU and its placement."""
        profile = self.attributes.get(self.driver, {}).get("profile")
        product = self.attributes.get(self.driver, {}).get("productName")
        uses = self.device.consumes_counters or []
        slices = sorted(
            int(k.removeprefix("memorySlice")) for k in (self.device.capacity or {}) if k.startswith("memorySlice")
        )
        if profile is None or product is None or len(uses) != 1 or not slices:
            return None
        try:
            geometry = geometry_of(str(product))
        except UserError:
            return None
        return geometry, (self.driver, self.pool, uses[0].counter_set), MigPlacement(slices[0], str(profile))

    def attribute(self, qualified: str) -> Any:
        domain, name = self._split(qualified)
        return self.attributes.get(domain, {}).get(name)


def _tolerates(tolerations: list[DeviceToleration], key: str, value: str | None, effect: str) -> bool:
    for tol in tolerations:
        if tol.effect not in (None, effect):
            continue
        if tol.operator == "Exists" and (tol.key in (None, "", key)):
            return True
        if tol.key == key and (tol.value or "") == (value or ""):
            return True
    return False


@dataclass
class _Alternative:
    result_name: str  # "gpu" or "gpu/large" for a firstAvailable sub-request
    parent: str
    body: _RequestBody
    candidates: list[PoolDevice]


class Allocator:
    """Holds the published devices and which of them are allocated; `allocate(claim)` fills in the claim status."""

    def __init__(
        self, slices: Iterable[ResourceSlice], classes: Iterable[DeviceClass], allocated: Iterable[DeviceKey] = ()
    ) -> None:
        self.devices: list[PoolDevice] = []
        slices_list = list(slices)
        for sl in slices_list:
            node = sl.spec.node_name
            for dev in sl.spec.devices or []:
                self.devices.append(PoolDevice(sl.spec.driver, sl.spec.pool.name, dev.node_name or node, dev))
        self.classes = {c.metadata.name: c for c in classes if c.metadata.name}
        self.allocated: set[DeviceKey] = set(allocated)
        self._by_node: dict[str | None, list[PoolDevice]] = {}
        for pooled in self.devices:
            self._by_node.setdefault(pooled.node, []).append(pooled)
        self._selector_results: dict[tuple[str, DeviceKey], bool] = {}  # devices do not change; selectors are pure
        # partitionable devices: counters each pool's counter sets hold, and how much allocations consumed
        self.counters: dict[CounterKey, Quantity] = {}
        for sl in slices_list:
            for cs in sl.spec.shared_counters or []:
                for name, counter in cs.counters.items():
                    self.counters[(sl.spec.driver, sl.spec.pool.name, cs.name, name)] = Quantity(counter.value)
        self.consumed: dict[CounterKey, Fraction] = {}
        self._placed: dict[tuple[str, str, str], set[MigPlacement]] = {}  # MIG instances made on each GPU (counter set)
        self._gpu_order: dict[tuple[str, str, str], int] = {}

    @property
    def nodes(self) -> list[str]:
        return sorted({d.node for d in self.devices if d.node})

    def _class(self, name: str) -> DeviceClass:
        if name not in self.classes:
            vendor = driverless_vendor(name)
            if vendor is not None:
                raise no_driver_error(vendor, f"device class {name!r}")
            raise UserError(
                f"device class {name!r} not found", fix=f"create it, or use one of: {', '.join(self.classes) or '-'}"
            )
        return self.classes[name]

    def _matches(self, body: _RequestBody, dev: PoolDevice) -> bool:
        cls = self._class(body.device_class_name)
        for sel in (cls.spec.selectors or []) + (body.selectors or []):
            if sel.cel is None:
                continue
            key = (sel.cel.expression, dev.key)
            if key not in self._selector_results:
                selector = compile_selector(sel.cel.expression)
                self._selector_results[key] = selector.matches(dev.cel, dev.device.name)
            if not self._selector_results[key]:
                return False
        for taint in dev.device.taints or []:
            if not _tolerates(body.tolerations or [], taint.key, taint.value, taint.effect):
                return False
        for qualified, want in ((body.capacity.requests or {}) if body.capacity else {}).items():
            domain, name = dev._split(qualified)
            have = dev.capacity.get(domain, {}).get(name)
            if have is None or have < Quantity(want):
                return False
        return True

    def _candidates(self, body: _RequestBody, node: str | None) -> list[PoolDevice]:
        out = []
        nearby = self._by_node.get(node, []) + (self._by_node.get(None, []) if node is not None else [])
        for dev in nearby:
            if dev.key in self.allocated and not body.admin_access:
                continue
            if not self._counters_fit([dev]):
                continue
            if self._matches(body, dev):
                out.append(dev)
        return sorted(out, key=self._packing_order)

    def _packing_order(self, dev: PoolDevice) -> tuple[int, int, int, int]:
        """Dynamic MIG: fuller GPUs first, one GPU's placements together (so a claim's instances share a GPU when
        they can), and on a GPU the placement MigLayout.allocate would choose (the most completions)."""
        mig = dev.mig_placement
        if mig is None:
            return (0, 0, 0, 0)
        geometry, gpu, placement = mig
        placed = self._placed.get(gpu, set())
        order = self._gpu_order.setdefault(gpu, len(self._gpu_order))
        return (-len(placed), order, -completions(geometry, frozenset(placed | {placement})), -placement.start)

    def allocate(
        self, claim: ResourceClaim, node: str | None = None, consumer: ResourceClaimConsumerReference | None = None
    ) -> ResourceClaim:
        """Allocate on `node` (or the first node where the claim fits) and return the claim with its status set.

        `consumer` (the pod) goes into `status.reservedFor`, as the scheduler records who uses the claim.
        """
        name = claim.metadata.name or "(unnamed)"
        requests = (claim.spec.devices.requests if claim.spec.devices else None) or []
        if not requests:
            raise UserError(f"ResourceClaim {name} has no device requests", fix="add spec.devices.requests")
        nodes = [node] if node else (self.nodes or [None])  # type: ignore[list-item]
        reasons: list[str] = []
        for candidate in nodes:
            found, reason = self._try_node(claim, candidate)
            if found is not None:
                done = self._write(claim, candidate, found)
                if consumer is not None and done.status is not None:
                    done.status.reserved_for = [consumer]
                return done
            reasons.append(f"{candidate or 'any node'}: {reason}")
        self._driverless(claim)
        shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more nodes" if len(reasons) > 3 else "")
        raise UserError(f"cannot allocate ResourceClaim {name}: {shown}", fix="relax the selectors or free devices")

    def _driverless(self, claim: ResourceClaim) -> None:
        """A claim that failed while naming a vendor without a DRA driver fails for that reason."""
        assert claim.spec.devices is not None
        for req in claim.spec.devices.requests or []:
            bodies = [req.exactly] if req.exactly is not None else list(req.first_available or [])
            for body in bodies:
                if body is None:
                    continue
                texts = [body.device_class_name] + [sel.cel.expression for sel in body.selectors or [] if sel.cel]
                vendor = next((v for t in texts if (v := driverless_vendor(t)) is not None), None)
                if vendor is not None:
                    raise no_driver_error(vendor, f"ResourceClaim {claim.metadata.name}: request {req.name}")

    def _try_node(self, claim: ResourceClaim, node: str | None) -> tuple[list[tuple[str, PoolDevice]] | None, str]:
        assert claim.spec.devices is not None
        groups: list[list[_Alternative]] = []
        for req in claim.spec.devices.requests or []:
            if req.exactly is not None:
                alts = [_Alternative(req.name, req.name, req.exactly, [])]
            else:
                alts = [_Alternative(f"{req.name}/{s.name}", req.name, s, []) for s in req.first_available or []]
            for alt in alts:
                alt.candidates = self._candidates(alt.body, node)
            groups.append(alts)
        constraints = claim.spec.devices.constraints or []
        steps = [0]
        for chosen in self._search(groups, 0, [], constraints, steps):
            return chosen, ""
        if steps[0] >= MAX_STEPS:
            return None, f"search stopped after {MAX_STEPS} steps"
        return None, self._why(groups)

    def _why(self, groups: list[list[_Alternative]]) -> str:
        parts = []
        for alts in groups:
            alt = alts[0]
            want = alt.body.wanted
            have = len(alt.candidates)
            if (want is None and have == 0) or (want is not None and have < want):
                wanted = "all" if want is None else str(want)
                cls = alt.body.device_class_name
                parts.append(f"request {alt.parent} wants {wanted} of class {cls}, {have} free devices match")
        return "; ".join(parts) or "the constraints cannot all be met"

    def _search(
        self,
        groups: list[list[_Alternative]],
        i: int,
        chosen: list[tuple[str, PoolDevice]],
        constraints: list[DeviceConstraint],
        steps: list[int],
    ) -> Iterator[list[tuple[str, PoolDevice]]]:
        if i == len(groups):
            yield list(chosen)
            return
        taken = {d.key for _, d in chosen}
        for alt in groups[i]:
            free = [d for d in alt.candidates if d.key not in taken]
            if alt.body.wanted is None:
                if not alt.candidates or len(free) != len(alt.candidates):
                    continue
                picks: Iterator[list[PoolDevice]] = iter([free])
            else:
                picks = self._combinations(free, alt.body.wanted, alt, chosen, constraints, steps)
            for pick in picks:
                extra = [(alt.result_name, d) for d in pick]
                if not self._ok(chosen + extra, constraints):
                    continue
                yield from self._search(groups, i + 1, chosen + extra, constraints, steps)
                if steps[0] >= MAX_STEPS:
                    return

    def _combinations(
        self,
        free: list[PoolDevice],
        k: int,
        alt: _Alternative,
        chosen: list[tuple[str, PoolDevice]],
        constraints: list[DeviceConstraint],
        steps: list[int],
    ) -> Iterator[list[PoolDevice]]:
        def rec(start: int, pick: list[PoolDevice]) -> Iterator[list[PoolDevice]]:
            if len(pick) == k:
                yield list(pick)
                return
            for j in range(start, len(free) - (k - len(pick)) + 1):
                steps[0] += 1
                if steps[0] >= MAX_STEPS:
                    return
                pick.append(free[j])
                if self._ok(chosen + [(alt.result_name, d) for d in pick], constraints):
                    yield from rec(j + 1, pick)
                pick.pop()

        yield from rec(0, [])

    def _counters_fit(self, devices: list[PoolDevice]) -> bool:
        wanted: dict[CounterKey, Fraction] = {}
        for dev in devices:
            for key, amount in dev.consumption.items():
                wanted[key] = wanted.get(key, Fraction(0)) + amount
        for key, amount in wanted.items():
            have = self.counters.get(key)
            if have is None or self.consumed.get(key, Fraction(0)) + amount > have.value:
                return False
        return True

    def _ok(self, chosen: list[tuple[str, PoolDevice]], constraints: list[DeviceConstraint]) -> bool:
        return _consistent(chosen, constraints) and self._counters_fit([d for _, d in chosen])

    def _write(self, claim: ResourceClaim, node: str | None, found: list[tuple[str, PoolDevice]]) -> ResourceClaim:
        assert claim.spec.devices is not None
        results = [
            DeviceRequestAllocationResult(request=req, driver=d.driver, pool=d.pool, device=d.device.name)
            for req, d in found
        ]
        bodies: dict[str, _RequestBody] = {}
        for req in claim.spec.devices.requests or []:
            if req.exactly is not None:
                bodies[req.name] = req.exactly
            for sub in req.first_available or []:
                bodies[f"{req.name}/{sub.name}"] = sub
        config: list[DeviceAllocationConfiguration] = []
        for name in dict.fromkeys(req for req, _ in found):
            for cfg in self._class(bodies[name].device_class_name).spec.config or []:
                config.append(DeviceAllocationConfiguration(source="FromClass", requests=[name], opaque=cfg.opaque))
        for claim_cfg in claim.spec.devices.config or []:
            config.append(
                DeviceAllocationConfiguration(source="FromClaim", requests=claim_cfg.requests, opaque=claim_cfg.opaque)
            )
        selector = None
        if node and any(d.node for _, d in found):
            selector = NodeSelector(
                node_selector_terms=[
                    NodeSelectorTerm(
                        match_fields=[NodeSelectorRequirement(key="metadata.name", operator="In", values=[node])]
                    )
                ]
            )
        for _, d in found:
            if not d.device.allow_multiple_allocations:
                self.allocated.add(d.key)
            for key, amount in d.consumption.items():
                self.consumed[key] = self.consumed.get(key, Fraction(0)) + amount
            if d.mig_placement is not None:
                self._placed.setdefault(d.mig_placement[1], set()).add(d.mig_placement[2])
        out = claim.model_copy(deep=True)
        out.status = ResourceClaimStatus(
            allocation=AllocationResult(
                devices=DeviceAllocationResult(results=results, config=config or None), node_selector=selector
            )
        )
        return out

    def release(self, claim: ResourceClaim) -> None:
        alloc = claim.status.allocation if claim.status else None
        by_key = {d.key: d for d in self.devices}
        for res in (alloc.devices.results if alloc and alloc.devices else None) or []:
            key = (res.driver, res.pool, res.device)
            self.allocated.discard(key)
            dev = by_key.get(key)
            if dev is None:
                continue
            for counter, amount in dev.consumption.items():
                self.consumed[counter] = self.consumed.get(counter, Fraction(0)) - amount
            if dev.mig_placement is not None:
                self._placed.get(dev.mig_placement[1], set()).discard(dev.mig_placement[2])


def _consistent(chosen: list[tuple[str, PoolDevice]], constraints: list[DeviceConstraint]) -> bool:
    for con in constraints:
        scope = set(con.requests or [])
        devs = [d for req, d in chosen if not scope or req in scope or req.split("/")[0] in scope]
        attr = con.match_attribute or con.distinct_attribute or ""
        values = [d.attribute(attr) for d in devs]
        if con.match_attribute:
            if any(v is None for v in values) or len({_hashable(v) for v in values}) > 1:
                return False
        elif any(v is None for v in values) or len({_hashable(v) for v in values}) != len(values):
            return False
    return True


def _hashable(value: Any) -> Any:
    return (type(value).__name__, str(value))
