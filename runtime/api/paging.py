"""Nomad's list filtering and pagination, shared by every list endpoint that has them:
`?filter=` (a go-bexpr expression, runtime/lib/bexpr.py), `?per_page=`, `?next_token=`, and
`?reverse=true` where Nomad's list has a sort order to flip (evaluations, allocations,
deployments). The answer carries `X-Nomad-NextToken` when more items follow.

The algorithm is nomad/state/paginator/paginator.go `Paginator.Page`: walk the items in token
order; skip those before `next_token`; skip those the filter refuses; count the rest; the first
item past `per_page` that passes is not returned, and its token is the next page's token. So
pages concatenate to the whole filtered list, in order, without duplicates, and the next token
names an item that exists.

Tokens are Nomad's per list (nomad/state/paginator/tokenizer.go): `by_id` (nodes, node pools,
allocations or evaluations looked up by `prefix`), `by_namespace_id` ("<namespace>.<id>": jobs,
variables, services), `by_create_index` ("<CreateIndex>.<ID>": evaluations, allocations,
deployments), each comparing an item with the token as Nomad's does.

Invariants: callers hand in only the items the request's token may see (the ACL filtering of
runtime/api/authz.py happens before this, so a page neither leaks nor miscounts), already
sorted in their token's order; the filter sees each item's Nomad JSON (`subject`, computed only
when a filter is given). A filter that does not parse or cannot be evaluated is a 400 with
Nomad's text ("failed to create result paginator: failed to read filter expression: …",
"failed to read result page: …").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.request import ApiError, json_response
from yurt.runtime.lib.bexpr import BexprError
from yurt.runtime.lib.bexpr_eval import BexprEvalError, Filter, compile_filter

T = TypeVar("T")

#: Compares an item with the request's token: (the item's token, -1/0/1 like Go's cmp.Compare).
Tokenizer = Callable[[Any, str], tuple[str, int]]

NEXT_TOKEN_HEADER: Final = "X-Nomad-NextToken"


def _cmp(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def by_id(key: Callable[[Any], str]) -> Tokenizer:
    """tokenizer.go `IDTokenizer`: the item's ID (a node pool's name)."""
    def tokenize(item: Any, target: str) -> tuple[str, int]:
        token = key(item)
        return token, _cmp(token, target)
    return tokenize


def by_namespace_id(namespace: Callable[[Any], str], key: Callable[[Any], str]) -> Tokenizer:
    """tokenizer.go `NamespaceIDTokenizer`: "<namespace>.<id>", compared as a string."""
    def tokenize(item: Any, target: str) -> tuple[str, int]:
        token = f"{namespace(item)}.{key(item)}"
        return token, _cmp(token, target)
    return tokenize


def by_create_index(index: Callable[[Any], int], key: Callable[[Any], str]) -> Tokenizer:
    """tokenizer.go `CreateIndexAndIDTokenizer`: "<CreateIndex>.<ID>", compared by index, then
    ID; a token not of that form compares as a string."""
    def tokenize(item: Any, target: str) -> tuple[str, int]:
        token = f"{index(item)}.{key(item)}"
        head, dot, tail = target.partition(".")
        if not dot or not head.lstrip("+-").isdigit():
            return token, _cmp(token, target)
        return token, _cmp(index(item), int(head)) or _cmp(key(item), tail)
    return tokenize


def nomad_json(item: object) -> object:
    """The object as Nomad's API shows it: what a filter's selectors address."""
    if isinstance(item, dict | list | str | int | float | bool) or item is None:
        return item
    return msgspec.json.decode(msgspec.json.encode(item))


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_token: str


def query_filter(request: Request) -> Filter | None:
    """`?filter=`, compiled; None when absent. A 400 with Nomad's text when it does not
    parse (nomad/eval_endpoint.go `List`: "failed to create result paginator: …")."""
    text = request.query_params.get("filter", "")
    if not text:
        return None
    try:
        return compile_filter(text)
    except BexprError as e:
        raise ApiError(400, "failed to create result paginator: failed to read filter "
                            f"expression: {e}") from None


def query_per_page(request: Request) -> int:
    """command/agent/http.go `parsePagination`: a 32-bit integer, 0 (absent) for all."""
    raw = request.query_params.get("per_page", "")
    if not raw:
        return 0
    body = raw[1:] if raw[:1] in ("+", "-") else raw
    if not (body.isascii() and body.isdigit()) or not -(1 << 31) <= int(raw) < (1 << 31):
        raise ApiError(400, "Expect a number for `per_page` query string parameter")
    return int(raw)


def page(request: Request, items: Sequence[T], tokenizer: Tokenizer, *,
         subject: Callable[[T], object] = nomad_json, reversible: bool = False) -> Page[T]:
    """Nomad's `Paginator.Page` over `items` (sorted in token order, ACL-filtered already);
    `reversible`: `?reverse=true` walks them backwards, as the lists with a sort option do."""
    matches = query_filter(request)
    per_page = query_per_page(request)
    target = request.query_params.get("next_token", "")
    reverse = reversible and request.query_params.get("reverse") == "true"
    found_token = not target
    out: list[T] = []
    for item in (reversed(items) if reverse else items):
        token, compared = tokenizer(item, target)
        if not found_token and compared == (1 if reverse else -1):
            continue
        if matches is not None:
            try:
                if not matches(subject(item)):
                    continue
            except BexprEvalError as e:
                raise ApiError(400, f"failed to read result page: {e}") from None
        found_token = True
        if per_page != 0 and len(out) + 1 > per_page:
            return Page(out, token)
        out.append(item)
    return Page(out, "")


def paged_response(request: Request, items: Sequence[T], tokenizer: Tokenizer, *,
                   subject: Callable[[T], object] = nomad_json, reversible: bool = False,
                   shown: Callable[[list[T]], object] = lambda page_items: page_items
                   ) -> Response:
    """`page`, answered: `shown` turns the page's items into the body (stubs, say), and
    `X-Nomad-NextToken` carries the next token when there is one."""
    result = page(request, items, tokenizer, subject=subject, reversible=reversible)
    response = json_response(shown(result.items))
    if result.next_token:
        response.headers[NEXT_TOKEN_HEADER] = result.next_token
    return response
