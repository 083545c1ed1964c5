"""YAML that a person hands gpufleet (policies, manifests, configs), read with bounds.

Safe loading alone stops code execution, not exhaustion: a few lines of nested aliases ("billion laughs") expand
to billions of nodes once anything walks the result, and deep nesting overflows Python's stack. This loader counts
every node as it would be after alias expansion and the nesting depth while composing, and refuses past the
limits with an error that says which limit and where.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpufleet.errors import ManifestError

MAX_BYTES = 8 * 1024 * 1024
MAX_NODES = 200_000  # after alias expansion: far above any real policy or manifest
MAX_DEPTH = 64


class _Bounded(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.sizes: dict[int, int] = {}  # id(node) -> how many values it holds once aliases are expanded

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
        mark = self.peek_event().start_mark
        alias = self.check_event(yaml.AliasEvent)
        node = super().compose_node(parent, index)  # type: ignore[arg-type]
        self.depth -= 1
        if node is None:
            return None
        size = self.sizes.get(id(node))
        if alias and size is None:  # the alias names a node still being read: it holds itself
            raise _Refused("holds itself (an alias inside its own anchor)", mark)
        if size is None:
            size = 1
            if isinstance(node, yaml.SequenceNode):
                size += sum(self.sizes.get(id(child), 1) for child in node.value)
            elif isinstance(node, yaml.MappingNode):
                size += sum(self.sizes.get(id(k), 1) + self.sizes.get(id(v), 1) for k, v in node.value)
            self.sizes[id(node)] = size
            if size > MAX_NODES:  # an alias adds its anchor's whole size to the node holding it
                raise _Refused(f"expands to more than {MAX_NODES:,} values (aliases)", mark)
        return node


class _Refused(Exception):
    def __init__(self, why: str, mark: yaml.Mark | None) -> None:
        super().__init__(why)
        self.why = why
        self.mark = mark


def load_documents(text: str, source: str) -> list[Any]:
    """Every document of `text`; a `ManifestError` naming `source` for bad YAML or input past the limits."""
    if len(text) > MAX_BYTES:
        raise ManifestError(source, f"larger than {MAX_BYTES // (1024 * 1024)} MiB", fix="pass the real file")
    loader = _Bounded(text)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
        return docs
    except _Refused as exc:
        where = f" at line {exc.mark.line + 1}" if exc.mark else ""
        raise ManifestError(source, f"refused{where}: it {exc.why}", fix="write the values out plainly") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(source, f"not valid YAML{where}: {problem}", fix="fix the YAML syntax") from None
    finally:
        loader.dispose()


def load(text: str, source: str) -> Any:
    """The single document of `text` (None when empty), with the same bounds."""
    docs = load_documents(text, source)
    if len(docs) > 1:
        raise ManifestError(source, f"holds {len(docs)} YAML documents, expected one", fix="keep one document")
    return docs[0] if docs else None
