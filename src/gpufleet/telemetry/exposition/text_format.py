"""Prometheus text exposition format 0.0.4: escaping, label pairs and float text, shared by the renderers."""

from __future__ import annotations


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_float(value: float) -> str:
    """Go-style shortest float text, as client libraries write it ("1.5", "2", "+Inf")."""
    value = float(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def label_pairs(items: list[tuple[str, str]]) -> str:
    """`k="v",k2="v2"`, values escaped, in the order given."""
    return ",".join(f'{k}="{escape_label_value(v)}"' for k, v in items)


def family_header(name: str, help_text: str, prom_type: str) -> str:
    return f"# HELP {name} {escape_help(help_text)}\n# TYPE {name} {prom_type}\n"
