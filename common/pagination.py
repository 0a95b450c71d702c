"""One way to page a queryset in the API: `?page=N&page_size=M`, with count and next/previous links."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer


class Pages(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


def paginate(request: Request, queryset: QuerySet[Any], serializer: type[BaseSerializer[Any]]) -> Response:
    """A page of `queryset` rendered with `serializer`."""
    pager = Pages()
    page = pager.paginate_queryset(queryset, request)
    return pager.get_paginated_response(serializer(page, many=True).data)
