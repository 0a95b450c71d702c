"""One way to page a queryset in the API: `?page=N&page_size=M`, with count and next/previous links."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from django.core.paginator import Page
from django.db.models import QuerySet
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response


class Pages(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class PageSerializer(serializers.Serializer[Any]):
    """The page envelope; a subclass adds `results`, the serializer of one item, and renders whole pages,
    so the schema of a list is the serializer its view renders with."""

    count = serializers.IntegerField(help_text="Items on every page together.")
    next = serializers.URLField(allow_null=True, help_text="The next page, or null on the last.")
    previous = serializers.URLField(allow_null=True, help_text="The previous page, or null on the first.")


def paginate(
    request: Request,
    queryset: QuerySet[Any],
    page_serializer: type[PageSerializer],
    prepare: Callable[[list[Any]], None] | None = None,
) -> Response:
    """A page of `queryset` rendered with `page_serializer`; `prepare` may first add to the page's rows
    what is read for a whole page at once (a few queries per page, never one per row)."""
    pager = Pages()
    page = pager.paginate_queryset(queryset, request)
    if prepare is not None and page is not None:
        prepare(page)
    count = cast(Page[Any], pager.page).paginator.count  # set by paginate_queryset: Pages always has a size
    links = {"next": pager.get_next_link(), "previous": pager.get_previous_link()}
    return Response(page_serializer({"count": count, **links, "results": page}).data)
