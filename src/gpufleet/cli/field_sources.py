"""Which of an agent's sources `gpufleet telemetry fields` and `gpufleet deploy size` speak of: the ones named, the
twin's agent's (--sim), this node's (what `gpufleet agent` would run here), or an NVIDIA node's agent."""

from __future__ import annotations

from gpufleet.errors import UserError
from gpufleet.telemetry.field_sources import SourceFields


def twin_agent() -> list[SourceFields]:
    """What `gpufleet agent --sim` runs: the twin, and the agent's attribution over the twin node's answers."""
    from gpufleet.agent.fields import ATTRIBUTION
    from gpufleet.sim.source import FIELDS

    return [FIELDS, ATTRIBUTION]


def chosen_sources(names: str, sim: bool, this_node: bool) -> tuple[list[SourceFields], str, list[str]]:
    """(the sources, a line naming them, why each source this node lacks is missing)."""
    from gpufleet.agent import fields

    if names and sim:
        raise UserError("--sources and --sim both name the sources", fix="give one of them")
    if sim:
        chosen = twin_agent()
        return chosen, f"the twin's agent's sources ({', '.join(s.source for s in chosen)})", []
    if names:
        from gpufleet.sim.source import FIELDS

        chosen = fields.named([n.strip() for n in names.split(",") if n.strip()], {"twin": FIELDS})
        return chosen, f"the sources {', '.join(s.source for s in chosen)}", []
    if this_node:
        chosen, missing = fields.this_node()
        return chosen, f"this node's agent's sources ({', '.join(s.source for s in chosen)})", missing
    chosen = fields.named(list(fields.NVIDIA_AGENT))
    return chosen, f"an NVIDIA node's agent's sources ({', '.join(s.source for s in chosen)})", []


def all_sources() -> list[SourceFields]:
    """Every source there is, the twin's included: who could fill a field a node leaves empty."""
    from gpufleet.agent.fields import known_sources
    from gpufleet.sim.source import FIELDS

    return [*known_sources().values(), FIELDS]
