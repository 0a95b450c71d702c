"""The API's parsers: DRF's JSON parser with the nesting depth bounded before parsing, and a text parser
(YAML job specs); both read at most DATA_UPLOAD_MAX_MEMORY_SIZE of a body."""

from __future__ import annotations

import io
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser

MAX_JSON_DEPTH = 64


def json_too_deep(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON text nests arrays and objects deeper than `limit` (brackets inside strings do not
    count). Cheap when the text has few brackets; it never parses."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth, in_string, escaped = 0, False, False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return False


def read_bounded(stream: Any) -> bytes:
    """The whole body from `stream`, refused with Django's RequestDataTooBig (the API answers 413) past
    DATA_UPLOAD_MAX_MEMORY_SIZE, as Django refuses `request.body`: a parser reading the stream itself would
    otherwise take a body of any size into memory."""
    if stream is None:
        return b""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    raw = stream.read() if limit is None else stream.read(limit + 1)
    if limit is not None and len(raw) > limit:
        raise RequestDataTooBig("Request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE.")
    return bytes(raw)


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, refusing nesting deeper than MAX_JSON_DEPTH before parsing (Python's parser
    would recurse until RecursionError, a 500)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = read_bounded(stream)
        if json_too_deep(raw):
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            return super().parse(io.BytesIO(raw), media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None


class TextParser(BaseParser):
    """Any other body as UTF-8 text, untouched (a YAML job spec for the spec parser), read with the same
    size limit as every other body."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = read_bounded(stream)
        try:
            return str(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ParseError("the body is not UTF-8 text") from exc
