"""A hang whose ranks share a bad link is put on that link: fabric facts fed to the correlator directly."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from gpufleet.health.correlation import Correlator, suspect
from gpufleet.health.detectors.seen import JobView
from gpufleet.model import Entity, EntityKind, IncidentState, RootCause, Severity
from gpufleet.model.fabric_facts import FabricFacts, HostRail, LinkProblem
from gpufleet.model.observe import Finding, NodeInventory

T0 = 1_800_000_000.0
HOSTS = ("dgx-003", "dgx-007", "dgx-010")
RANKS = tuple((host, gpu) for host in HOSTS for gpu in range(2))
UPLINK = "leaf-su1-r2/33 <-> spine-2/5"
FLAP = Finding(T0, RootCause.ib_link_flap, Entity(EntityKind.link, name="leaf-su1-r2/33<->spine-2/5"),
               Severity.critical, f"link {UPLINK} went down 4 times in 10 min", "LinkDownedCounter +4", "fabric",
               action="ISOLATE_PORT")  # fmt: skip
CABLE = "dgx-010/mlx5_0/1 <-> leaf-su2-r0/7"
ERRORS = Finding(T0, RootCause.ib_symbol_errors, Entity(EntityKind.port, "dgx-010", 1, "mlx5_0"), Severity.warning,
                 f"{CABLE}: 900 symbol errors in 10 min", "SymbolErrorCounter +900", "fabric")  # fmt: skip


def rails(leaves: dict[str, str]) -> dict[str, tuple[HostRail, ...]]:
    return {host: (HostRail(f"{host}/mlx5_0/1", 0, leaf),) for host, leaf in leaves.items()}


SPLIT = rails({"dgx-003": "leaf-su1-r2", "dgx-007": "leaf-su1-r2", "dgx-010": "leaf-su2-r2"})


def view(facts: FabricFacts) -> tuple[list[list[str]], object]:
    asked: list[list[str]] = []

    def fabric(hosts: Collection[str]) -> FabricFacts:
        asked.append(sorted(hosts))
        return facts

    return asked, fabric


def no_inventory() -> list[NodeInventory]:
    return []


def hang(c: Correlator, quiet: int = 4, seconds: int = 60) -> None:
    """The job stops stepping at T0; rank `quiet` sits idle while the others spin in NCCL."""
    util = np.full(len(RANKS), 100.0)
    util[quiet] = 0.0
    for k in range(seconds):
        c.tick(T0 + k, [JobView("train", RANKS, T0, 2.0)], lambda j: util, no_inventory)


def test_a_hang_whose_ranks_share_a_flapping_uplink_joins_the_link_incident() -> None:
    asked, fabric = view(FabricFacts(SPLIT, uplinks={"leaf-su1-r2": (LinkProblem(UPLINK, "is flapping", FLAP),)}))
    c = Correlator(fabric=fabric)
    (link,) = c.add([FLAP])  # the fabric service's finding, as the control plane feeds it
    hang(c)
    assert list(c.book.incidents) == [link.id]  # no incident blaming rank 4's GPU
    assert link.effects == [
        f"job train hung in a collective: ranks on dgx-003 and dgx-007 share leaf-su1-r2, whose uplink {UPLINK} "
        "is flapping"
    ]
    assert any("rank 4 (dgx-010/gpu0) never arrived" in e.text and "went down 4 times" in e.text for e in link.evidence)
    assert asked[0] == sorted(HOSTS)


def test_the_link_incident_opens_from_the_facts_when_it_is_not_open_yet() -> None:
    _, fabric = view(FabricFacts(SPLIT, uplinks={"leaf-su1-r2": (LinkProblem(UPLINK, "is flapping", FLAP),)}))
    c = Correlator(fabric=fabric)
    hang(c)
    (inc,) = c.book.incidents.values()
    assert inc.cause is RootCause.ib_link_flap and inc.entity == FLAP.entity and inc.action == "ISOLATE_PORT"
    assert inc.summary == FLAP.summary and inc.state is IncidentState.open
    assert inc.effects and "share leaf-su1-r2" in inc.effects[0]


def test_errors_on_the_quiet_ranks_own_cable_take_the_blame_before_a_shared_uplink() -> None:
    warning_flap = LinkProblem(UPLINK, "is flapping", Finding(**{**_fields(FLAP), "severity": Severity.warning}))
    facts = FabricFacts(
        SPLIT,
        cables={"dgx-010": (LinkProblem(CABLE, "counts symbol errors", ERRORS),)},
        uplinks={"leaf-su1-r2": (warning_flap,)},
    )
    _, fabric = view(facts)
    c = Correlator(fabric=fabric)
    (port,) = c.add([ERRORS])
    hang(c, quiet=4)  # rank 4 runs on dgx-010
    assert list(c.book.incidents) == [port.id]
    assert port.effects == [
        f"job train hung in a collective: ranks on dgx-010 reach the fabric through {CABLE}, which counts symbol errors"
    ]
    assert any("1 other cable problem(s) on the job's path" in e.text for e in port.evidence)


def test_uplinks_of_a_leaf_every_rank_shares_are_not_on_the_path() -> None:
    one_leaf = rails(dict.fromkeys(HOSTS, "leaf-su1-r2"))
    _, fabric = view(FabricFacts(one_leaf, uplinks={"leaf-su1-r2": (LinkProblem(UPLINK, "is flapping", FLAP),)}))
    c = Correlator(fabric=fabric)
    hang(c)
    (inc,) = c.book.incidents.values()
    assert inc.cause is RootCause.nccl_hang and str(inc.entity) == "gpu/dgx-010/0"  # as without a fabric


def test_a_lost_gpu_explains_the_hang_not_the_fabric() -> None:
    asked, fabric = view(FabricFacts(SPLIT, uplinks={"leaf-su1-r2": (LinkProblem(UPLINK, "is flapping", FLAP),)}))
    c = Correlator(fabric=fabric)
    util = np.full(len(RANKS), 100.0)
    util[2] = np.nan
    for k in range(60):
        c.tick(T0 + k, [JobView("train", RANKS, T0, 2.0)], lambda j: util, no_inventory)
    assert asked == []
    (inc,) = c.book.incidents.values()
    assert inc.cause is RootCause.training_stall and "unreachable" in inc.summary


def test_suspect_ranks_stops_before_losses_and_names_many_hosts_briefly() -> None:
    many = rails({f"h{k}": "leaf-a" if k < 6 else "leaf-b" for k in range(8)})
    problem = LinkProblem(UPLINK, "is down", FLAP)
    found = suspect([f"h{k}" for k in range(8)], FabricFacts(many, uplinks={"leaf-a": (problem,)}))
    assert found is not None
    assert found[1] == f"ranks on h0, h1, h2, h3 and 2 more share leaf-a, whose uplink {UPLINK} is down"
    assert suspect(["h0", "h1"], FabricFacts(many, uplinks={"leaf-a": (problem,)})) is None  # one leaf


def _fields(f: Finding) -> dict[str, object]:
    return {name: getattr(f, name) for name in f.__struct_fields__}
