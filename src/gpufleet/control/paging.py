"""Long lists a page at a time, as the Kubernetes API pages them: `limit` items, and an opaque `continue` token
that the next request passes to get the items after them.

The token names the last item given (its sort key, and how many items with that same key were given), not an
offset, so items added or removed between two requests shift nothing: each item still in the list is given once,
in order.
"""

from __future__ import annotations

import base64
import binascii
import json
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gpufleet.errors import UserError

DEFAULT_LIMIT = 500  # kubectl's chunk size
MAX_LIMIT = 5000
MAX_TOKEN = 2048  # characters

T = TypeVar("T")
Key = tuple[Any, ...]


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next: str | None  # the `continue` token for the next page; None on the last
    remaining: int  # items after this page

    def metadata(self) -> dict[str, Any]:
        """The page's list metadata, in the Kubernetes API's names."""
        return {"continue": self.next, "remainingItemCount": self.remaining}


def page(items: Sequence[T], key: Callable[[T], Key], limit: int | None, token: str | None = None) -> Page[T]:
    """The page of `items` (sorted by `key`, of JSON-able values) after `token`, at most `limit` long (None: all)."""
    keys = [key(item) for item in items]
    start = 0
    if token:
        after, given = _decode(token)
        try:
            start = min(bisect_left(keys, after) + given, bisect_right(keys, after))
        except TypeError:  # a key of other types than this list's
            raise _bad_token() from None
    end = len(items) if limit is None else min(len(items), start + limit)
    shown = list(items[start:end])
    if end >= len(items) or not shown:
        return Page(shown, None, 0)
    last = keys[end - 1]
    given = end - bisect_left(keys, last)  # the items with the last key given so far, on this page or before
    return Page(shown, _encode(last, given), len(items) - end)


def _encode(key: Key, given: int) -> str:
    raw = json.dumps({"k": list(key), "n": given}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(token: str) -> tuple[Key, int]:
    try:
        if len(token) > MAX_TOKEN:
            raise ValueError(token)
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        body = json.loads(raw)
        key, given = body["k"], body["n"]
        if not isinstance(key, list) or not isinstance(given, int) or given < 0:
            raise ValueError(body)
    except (ValueError, TypeError, KeyError, binascii.Error, UnicodeDecodeError):
        raise _bad_token() from None
    return tuple(key), given


def _bad_token() -> UserError:
    return UserError(
        "the continue token is not one this list gave",
        fix="pass the `continue` value of the previous page unchanged, or start again without it",
    )
