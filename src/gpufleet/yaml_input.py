"""The one reader of YAML and JSON that a person hands gpufleet (policies, manifests, configs, captures), with bounds.

Safe loading alone stops code execution, not exhaustion or crashes: a few lines of nested aliases ("billion laughs")
expand to billions of nodes once anything walks the result, deep nesting overflows Python's stack, an integer of more
than 4,300 digits is refused by Python's own int conversion (ValueError), a date such as 2024-13-45 fails to build,
and a control character or a byte that is not UTF-8 stops the reader. Every one of those is refused here, while
reading, with a `ManifestError` that names the file, the problem (and where) and the fix, never an exception a
command did not expect. `read_file` opens a named file with the same bounds (a regular file, a size limit, strict
UTF-8), so a command reads a config with `load_file` and knows any failure is a one-line user error.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from gpufleet.errors import ManifestError

MAX_BYTES = 8 * 1024 * 1024
MAX_CAPTURE_BYTES = 512 * 1024 * 1024  # `kubectl get pods -A -o json` of a large cluster
MAX_NODES = 200_000  # after alias expansion: far above any real policy or manifest
MAX_DEPTH = 64
MAX_CAPTURE_DEPTH = 200  # a tool's output (CRD schemas nest deep), still far inside Python's stack
MAX_INT_DIGITS = 4300  # Python's own limit on converting between int and str (sys.get_int_max_str_digits)
_MAX_INT_BITS = int(MAX_INT_DIGITS * 3.3219280948873626)  # log2(10): an int past this cannot be printed in decimal
# What YAML allows in a stream (PyYAML's reader refuses the rest): tab, newlines and printable Unicode.
_NOT_PRINTABLE = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_PLAIN = "write the values out plainly"
_Fast: type[Any] | None = None  # libyaml's safe loader with the bounded constructors, when libyaml is built


class _Refused(Exception):
    def __init__(self, why: str, mark: yaml.Mark | None) -> None:
        super().__init__(why)
        self.why = why
        self.mark = mark


class _Constructors(yaml.constructor.SafeConstructor):
    """Scalars that would raise something other than a YAML error are refused where they stand."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:
            raise _Refused(f"holds a value that cannot be read ({exc})", node.start_mark) from None


def _construct_int(loader: Any, node: yaml.ScalarNode) -> int:
    """YAML's int, refused past Python's digit limit before any arithmetic (a 1:59:59... form is quadratic)."""
    text = str(loader.construct_scalar(node))
    if len(text.replace("_", "")) > MAX_INT_DIGITS + 2:  # a sign and a base prefix
        raise _Refused(f"holds an integer of more than {MAX_INT_DIGITS:,} digits", node.start_mark)
    value = int(yaml.constructor.SafeConstructor.construct_yaml_int(loader, node))
    if value.bit_length() > _MAX_INT_BITS:  # 0x..., 0b... or 1:59:59... forms of a number that large
        raise _Refused(f"holds an integer of more than {MAX_INT_DIGITS:,} digits", node.start_mark)
    return value


class _Bounded(_Constructors, yaml.SafeLoader):
    def __init__(self, stream: str, max_depth: int = MAX_DEPTH) -> None:
        super().__init__(stream)
        self.depth = 0
        self.max_depth = max_depth
        self.sizes: dict[int, int] = {}  # id(node) -> how many values it holds once aliases are expanded

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        self.depth += 1
        if self.depth > self.max_depth:
            raise _Refused(f"is nested deeper than {self.max_depth} levels", self.peek_event().start_mark)
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


_Bounded.add_constructor("tag:yaml.org,2002:int", _construct_int)

if hasattr(yaml, "CSafeLoader"):

    class _CBounded(_Constructors, yaml.CSafeLoader):  # type: ignore[misc,name-defined,unused-ignore]
        """libyaml's parser (it stops past 1,000 levels of nesting) with the bounded constructors."""

    _CBounded.add_constructor("tag:yaml.org,2002:int", _construct_int)
    _Fast = _CBounded


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit:,} bytes"


def _position(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    return f"line {line}, column {offset - (text.rfind(chr(10), 0, offset) + 1) + 1}"


def _check_text(text: str, source: str, limit: int) -> None:
    if len(text) > limit:
        raise ManifestError(source, f"larger than {_size(limit)}", fix="pass the real file")
    bad = _NOT_PRINTABLE.search(text)
    if bad:
        raise ManifestError(
            source,
            f"holds a control character (U+{ord(bad.group()):04X}) at {_position(text, bad.start())}",
            fix="remove it: a YAML file is plain text (save the file again, or retype that line)",
        )


def _bounds(capture: bool) -> tuple[int, int]:
    """(size, depth) limits: a config a person writes, or a capture a tool writes (see `load_documents`)."""
    return (MAX_CAPTURE_BYTES, MAX_CAPTURE_DEPTH) if capture else (MAX_BYTES, MAX_DEPTH)


def load_documents(text: str, source: str, *, capture: bool = False) -> list[Any]:
    """Every document of `text`; a `ManifestError` naming `source` for bad YAML or input past the limits.

    `capture` is for large machine-written input (rendered charts, `kubectl get -o yaml` lists): wider size and
    depth bounds, and libyaml's reader when it is built and the text has no anchors (so no alias can expand)."""
    limit, depth = _bounds(capture)
    _check_text(text, source, limit)
    fast = capture and _Fast is not None and "&" not in text
    loader = _Fast(text) if fast and _Fast is not None else _Bounded(text, depth)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
    except _Refused as exc:
        where = f" at line {exc.mark.line + 1}" if exc.mark else ""
        raise ManifestError(source, f"refused{where}: it {exc.why}", fix=_PLAIN) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc).splitlines()[0]
        raise ManifestError(source, f"not valid YAML{where}: {problem}", fix="fix the YAML syntax") from None
    except RecursionError:  # the pure-Python composer, should libyaml be missing
        raise ManifestError(source, f"refused: it is nested deeper than {depth} levels", fix=_PLAIN) from None
    finally:
        loader.dispose()
    if fast and any(_depth_over(doc, depth) for doc in docs):  # the bounded reader counted while composing
        raise ManifestError(source, f"refused: it is nested deeper than {depth} levels", fix=_PLAIN)
    return docs


def load(text: str, source: str) -> Any:
    """The single document of `text` (None when empty), with the same bounds."""
    docs = load_documents(text, source)
    if len(docs) > 1:
        raise ManifestError(source, f"holds {len(docs)} YAML documents, expected one", fix="keep one document")
    return docs[0] if docs else None


def load_json(text: str, source: str, *, capture: bool = False) -> Any:
    """The JSON value of `text`, with the same bounds as YAML (size, nesting depth, integer digits)."""
    limit, depth = _bounds(capture)
    if len(text) > limit:
        raise ManifestError(source, f"larger than {_size(limit)}", fix="pass the real file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(
            source, f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", fix="fix the JSON syntax"
        ) from None
    except RecursionError:
        raise ManifestError(source, f"refused: it is nested deeper than {depth} levels", fix=_PLAIN) from None
    except ValueError:  # Python's int conversion limit: json raises it for an integer past 4,300 digits
        why = f"refused: it holds an integer of more than {MAX_INT_DIGITS:,} digits"
        raise ManifestError(source, why, fix=_PLAIN) from None
    if _depth_over(data, depth):
        raise ManifestError(source, f"refused: it is nested deeper than {depth} levels", fix=_PLAIN)
    return data


def _depth_over(data: Any, limit: int) -> bool:
    """True when `data` nests containers deeper than `limit` (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, dict | list))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, dict | list))
    return False


def read_file(path: str | Path, *, capture: bool = False) -> str:
    """The text of a file a person names: a regular file within the size bound (`MAX_BYTES`, or
    `MAX_CAPTURE_BYTES` for a tool's `capture`), UTF-8 (a byte-order mark is allowed). Anything else is a
    `ManifestError` naming the file and what to do."""
    name, (limit, _) = str(path), _bounds(capture)
    try:
        mode = Path(path).stat().st_mode
    except FileNotFoundError:
        raise ManifestError(name, "file not found", fix="check the path") from None
    except OSError as exc:
        raise ManifestError(name, f"cannot read: {exc.strerror}", fix="check the path") from None
    if stat.S_ISDIR(mode):
        raise ManifestError(name, "is a directory", fix="pass the file itself")
    if not stat.S_ISREG(mode):  # /dev/zero, a FIFO: a stream that may never end
        raise ManifestError(name, "is not a regular file", fix="save it to a file first")
    try:
        with open(path, "rb") as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise ManifestError(name, f"cannot read: {exc.strerror}", fix="check the file's permissions") from None
    if len(data) > limit:
        raise ManifestError(name, f"larger than {_size(limit)}", fix="pass the real file")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ManifestError(name, "is UTF-16 text, not UTF-8", fix="save the file as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ManifestError(
            name, f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}", fix="save the file as UTF-8"
        ) from None


def load_file(path: str | Path) -> Any:
    """The single YAML document of a file (None when empty); a `.json` file is read as JSON."""
    text = read_file(path)
    return load_json(text, str(path)) if str(path).lower().endswith(".json") else load(text, str(path))


def load_file_documents(path: str | Path) -> list[Any]:
    """Every YAML document of a file."""
    return load_documents(read_file(path), str(path))
