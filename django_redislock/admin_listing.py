"""The held-locks changelist's query string: search, order, SCAN cursor and page number,
the links that change one of them, and the sortable column headers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest

from .inspection import LockInfo

#: The changelist's query parameters.
SEARCH_VAR = "q"
ORDER_VAR = "o"
CURSOR_VAR = "cursor"
PAGE_VAR = "p"
CONNECTION_VAR = "connection"
#: Orders a page can be sorted by (within the page: SCAN has no order).
ORDERINGS = {
    "name": lambda info: info.name,
    "ttl": lambda info: (info.ttl is None, info.ttl or 0.0),
}
COLUMNS = (("name", "Name"), ("ttl", "TTL left"))


@dataclass(frozen=True)
class ListQuery:
    """What one changelist request asks for (bad values fall back to the defaults)."""

    query: str
    order: str
    cursor: str | None
    page_number: int
    #: The connection parameter to keep in links ("" when there is only one alias).
    alias_param: str

    @classmethod
    def from_request(cls, request: HttpRequest, alias_param: str) -> ListQuery:
        order = request.GET.get(ORDER_VAR, "name")
        if order.lstrip("-") not in ORDERINGS:
            order = "name"
        try:
            page_number = max(1, int(request.GET.get(PAGE_VAR, "1")))
        except ValueError:
            page_number = 1
        return cls(
            query=request.GET.get(SEARCH_VAR, "").strip(),
            order=order,
            cursor=request.GET.get(CURSOR_VAR) or None,
            page_number=page_number,
            alias_param=alias_param,
        )

    def sort(self, infos: list[LockInfo]) -> None:
        """Sort one page in place by the requested column."""
        infos.sort(key=ORDERINGS[self.order.lstrip("-")], reverse=self.order.startswith("-"))

    def link(self, **changes: Any) -> str:
        """This changelist's URL query with ``changes`` (search, connection and order kept)."""
        params = {
            SEARCH_VAR: self.query,
            CONNECTION_VAR: self.alias_param,
            ORDER_VAR: self.order if self.order != "name" else "",
            **changes,
        }
        params = {k: v for k, v in params.items() if v not in (None, "")}
        return "?" + urlencode(params) if params else "?"

    def next_url(self, next_cursor: str | None) -> str | None:
        """The link to the next page of the scan, or None when the scan is complete."""
        if not next_cursor:
            return None
        return self.link(**{CURSOR_VAR: next_cursor, PAGE_VAR: self.page_number + 1})

    def headers(self) -> list[dict[str, Any]]:
        """The sortable column headers: a click toggles the direction on this page."""
        headers = []
        for field, label in COLUMNS:
            sorted_here = self.order.lstrip("-") == field
            ascending = sorted_here and not self.order.startswith("-")
            toggled = f"-{field}" if ascending else field
            here = {ORDER_VAR: toggled, CURSOR_VAR: self.cursor, PAGE_VAR: self.page_number}
            headers.append(
                {
                    "field": field,
                    "label": label,
                    "sorted": sorted_here,
                    "ascending": ascending,
                    "url": self.link(**here),
                }
            )
        return headers


__all__ = [
    "CONNECTION_VAR",
    "CURSOR_VAR",
    "ORDERINGS",
    "ORDER_VAR",
    "PAGE_VAR",
    "SEARCH_VAR",
    "ListQuery",
]
