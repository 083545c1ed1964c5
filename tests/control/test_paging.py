"""Paging a long list as the Kubernetes API does: `limit` items and a `continue` token naming the last one given,
so equal items across a page boundary, and items added or removed between pages, give each item still listed once."""

from __future__ import annotations

import pytest

from gpufleet.control.paging import page
from gpufleet.errors import UserError


def key(item: tuple[int, str]) -> tuple[int, str]:
    return item


def every_page(items: list[tuple[int, str]], limit: int) -> list[list[tuple[int, str]]]:
    out = [page(items, key, limit)]
    while out[-1].next is not None:
        out.append(page(items, key, limit, out[-1].next))
    return [p.items for p in out]


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 7, 100])
def test_equal_items_across_a_boundary_are_each_given_once(limit: int) -> None:
    items = sorted([(1, "a"), (2, "b"), (2, "b"), (2, "b"), (2, "b"), (3, "c"), (4, "d")])
    pages = every_page(items, limit)
    assert [item for p in pages for item in p] == items
    assert all(len(p) <= limit for p in pages) and all(pages)


def test_the_count_left_and_the_last_page() -> None:
    items = [(k, "x") for k in range(10)]
    first = page(items, key, 4)
    assert (first.items, first.remaining) == (items[:4], 6) and first.metadata()["continue"] == first.next
    last = page(items, key, 4, page(items, key, 4, first.next).next)
    assert (last.items, last.next, last.remaining) == (items[8:], None, 0)
    assert page(items, key, None).items == items


def test_items_that_come_and_go_between_pages_shift_nothing() -> None:
    items = [(k, "x") for k in range(0, 20, 2)]
    first = page(items, key, 3)  # 0, 2, 4
    changed = sorted([(k, "x") for k in range(6, 20, 2) if k != 10] + [(1, "x"), (5, "x"), (7, "x")])
    rest = page(changed, key, 100, first.next)
    assert rest.items == [(5, "x"), (6, "x"), (7, "x"), (8, "x"), (12, "x"), (14, "x"), (16, "x"), (18, "x")]


@pytest.mark.parametrize("token", ["x", "bm90IGEgdG9rZW4", "eyJrIjoxLCJuIjowfQ", "eyJrIjpbInMiXSwibiI6MH0", "=" * 5000])
def test_a_token_this_list_did_not_give_is_a_clear_error(token: str) -> None:
    with pytest.raises(UserError, match="continue token") as caught:
        page([(1, "a"), (2, "b")], key, 1, token)
    assert caught.value.fix
