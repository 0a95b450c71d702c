"""The OpenAPI v2 document in gnostic's protobuf form (``openapi.v2.Document``), which kubectl asks for.

A small protobuf wire-format writer for the messages of gnostic's ``openapiv2/OpenAPIv2.proto`` that a
Kubernetes document uses. Hand-written rather than built on the ``protobuf`` package: the message classes
would have to be generated from the .proto at build time or described field by field at run time anyway,
and the encoder for this one tree of messages is short. Field numbers follow OpenAPIv2.proto exactly.
Vendor extensions, defaults, examples and enum values are ``Any`` messages carrying YAML text, as gnostic
writes them and kube-openapi reads them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import yaml

Obj = dict[str, Any]
# The media type of the document: kubectl asks with "spec.v2@v1.0", which Go's mime parser refuses in a
# response's Content-Type, so the answer uses the other spelling the apiserver accepts.
PROTOBUF_CONTENT_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
Encoder = Callable[[Any], bytes]

_VARINT, _FIXED64, _LENGTH = 0, 1, 2


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _len_field(number: int, payload: bytes) -> bytes:
    return _key(number, _LENGTH) + _varint(len(payload)) + payload


def _string(number: int, value: Any) -> bytes:
    return _len_field(number, str(value).encode()) if value not in (None, "") else b""


def _bool(number: int, value: Any, *, always: bool = False) -> bytes:
    return _key(number, _VARINT) + _varint(1 if value else 0) if value or always else b""


def _int(number: int, value: Any) -> bytes:
    return _key(number, _VARINT) + _varint(int(value)) if value else b""


def _double(number: int, value: Any) -> bytes:
    return _key(number, _FIXED64) + struct.pack("<d", float(value)) if value else b""


def any_message(value: Any) -> bytes:
    """An ``Any`` holding ``value`` as YAML (field 2, ``yaml``)."""
    return _string(2, yaml.safe_dump(value, default_flow_style=False, sort_keys=False))


def _named(number: int, name: str, value: bytes) -> bytes:
    return _len_field(number, _string(1, name) + _len_field(2, value))


# Per message: JSON key -> (field number, how to encode the value).
_Field = tuple[int, str]
_MESSAGES: dict[str, dict[str, _Field]] = {
    "Document": {
        "swagger": (1, "str"),
        "info": (2, "Info"),
        "host": (3, "str"),
        "basePath": (4, "str"),
        "schemes": (5, "strs"),
        "consumes": (6, "strs"),
        "produces": (7, "strs"),
        "paths": (8, "Paths"),
        "definitions": (9, "Definitions"),
        "parameters": (10, "ParameterDefinitions"),
        "responses": (11, "ResponseDefinitions"),
        "security": (12, "SecurityRequirement*"),
        "securityDefinitions": (13, "SecurityDefinitions"),
        "tags": (14, "Tag*"),
        "externalDocs": (15, "ExternalDocs"),
        "x-": (16, "ext"),
    },
    "Info": {
        "title": (1, "str"),
        "version": (2, "str"),
        "description": (3, "str"),
        "termsOfService": (4, "str"),
        "contact": (5, "Contact"),
        "license": (6, "License"),
        "x-": (7, "ext"),
    },
    "Contact": {"name": (1, "str"), "url": (2, "str"), "email": (3, "str"), "x-": (4, "ext")},
    "License": {"name": (1, "str"), "url": (2, "str"), "x-": (3, "ext")},
    "ExternalDocs": {"description": (1, "str"), "url": (2, "str"), "x-": (3, "ext")},
    "Tag": {
        "name": (1, "str"),
        "description": (2, "str"),
        "externalDocs": (3, "ExternalDocs"),
        "x-": (4, "ext"),
    },
    "PathItem": {
        "$ref": (1, "str"),
        "get": (2, "Operation"),
        "put": (3, "Operation"),
        "post": (4, "Operation"),
        "delete": (5, "Operation"),
        "options": (6, "Operation"),
        "head": (7, "Operation"),
        "patch": (8, "Operation"),
        "parameters": (9, "ParametersItem*"),
        "x-": (10, "ext"),
    },
    "Operation": {
        "tags": (1, "strs"),
        "summary": (2, "str"),
        "description": (3, "str"),
        "externalDocs": (4, "ExternalDocs"),
        "operationId": (5, "str"),
        "produces": (6, "strs"),
        "consumes": (7, "strs"),
        "parameters": (8, "ParametersItem*"),
        "responses": (9, "Responses"),
        "schemes": (10, "strs"),
        "deprecated": (11, "bool"),
        "security": (12, "SecurityRequirement*"),
        "x-": (13, "ext"),
    },
    "JsonReference": {"$ref": (1, "str"), "description": (2, "str")},
    "BodyParameter": {
        "description": (1, "str"),
        "name": (2, "str"),
        "in": (3, "str"),
        "required": (4, "bool"),
        "schema": (5, "Schema"),
        "x-": (6, "ext"),
    },
    "Response": {
        "description": (1, "str"),
        "schema": (2, "SchemaItem"),
        "headers": (3, "Headers"),
        "examples": (4, "Examples"),
        "x-": (5, "ext"),
    },
    "Header": {
        "type": (1, "str"),
        "format": (2, "str"),
        "description": (18, "str"),
        "x-": (19, "ext"),
    },
    "Schema": {
        "$ref": (1, "str"),
        "format": (2, "str"),
        "title": (3, "str"),
        "description": (4, "str"),
        "default": (5, "any"),
        "multipleOf": (6, "num"),
        "maximum": (7, "num"),
        "exclusiveMaximum": (8, "bool"),
        "minimum": (9, "num"),
        "exclusiveMinimum": (10, "bool"),
        "maxLength": (11, "int"),
        "minLength": (12, "int"),
        "pattern": (13, "str"),
        "maxItems": (14, "int"),
        "minItems": (15, "int"),
        "uniqueItems": (16, "bool"),
        "maxProperties": (17, "int"),
        "minProperties": (18, "int"),
        "required": (19, "strs"),
        "enum": (20, "anys"),
        "additionalProperties": (21, "AdditionalPropertiesItem"),
        "type": (22, "TypeItem"),
        "items": (23, "ItemsItem"),
        "allOf": (24, "Schema*"),
        "properties": (25, "Properties"),
        "discriminator": (26, "str"),
        "readOnly": (27, "bool"),
        "xml": (28, "Xml"),
        "externalDocs": (29, "ExternalDocs"),
        "example": (30, "any"),
        "x-": (31, "ext"),
    },
    "Xml": {
        "name": (1, "str"),
        "namespace": (2, "str"),
        "prefix": (3, "str"),
        "attribute": (4, "bool"),
        "wrapped": (5, "bool"),
        "x-": (6, "ext"),
    },
    "ApiKeySecurity": {
        "type": (1, "str"),
        "name": (2, "str"),
        "in": (3, "str"),
        "description": (4, "str"),
        "x-": (5, "ext"),
    },
    "BasicAuthenticationSecurity": {"type": (1, "str"), "description": (2, "str"), "x-": (3, "ext")},
}

# The primitive fields shared by the query, path and header parameter messages (after required/in/...).
_PRIMITIVE_TAIL = [
    ("type", "str"),
    ("format", "str"),
    ("items", "PrimitivesItems"),
    ("collectionFormat", "str"),
    ("default", "any"),
    ("maximum", "num"),
    ("exclusiveMaximum", "bool"),
    ("minimum", "num"),
    ("exclusiveMinimum", "bool"),
    ("maxLength", "int"),
    ("minLength", "int"),
    ("pattern", "str"),
    ("maxItems", "int"),
    ("minItems", "int"),
    ("uniqueItems", "bool"),
    ("enum", "anys"),
    ("multipleOf", "num"),
    ("x-", "ext"),
]


def _numbered(head: list[tuple[str, str]]) -> dict[str, _Field]:
    return {key: (i, kind) for i, (key, kind) in enumerate(head + _PRIMITIVE_TAIL, start=1)}


_MESSAGES["QueryParameterSubSchema"] = _numbered(
    [
        ("required", "bool"),
        ("in", "str"),
        ("description", "str"),
        ("name", "str"),
        ("allowEmptyValue", "bool"),
    ]
)
_MESSAGES["FormDataParameterSubSchema"] = _MESSAGES["QueryParameterSubSchema"]
_MESSAGES["PathParameterSubSchema"] = _numbered(
    [("required", "bool"), ("in", "str"), ("description", "str"), ("name", "str")]
)
_MESSAGES["HeaderParameterSubSchema"] = _MESSAGES["PathParameterSubSchema"]
_MESSAGES["PrimitivesItems"] = _numbered([])

# Messages that are a JSON object of named values: repeated Named<value> in field 1.
_MAPS = {
    "Definitions": "Schema",
    "Properties": "Schema",
    "ParameterDefinitions": "Parameter",
    "ResponseDefinitions": "Response",
    "SecurityDefinitions": "SecurityDefinitionsItem",
    "Headers": "Header",
}
_SECURITY = {"basic": 1, "apiKey": 2}
_NON_BODY = {"header": 1, "formData": 2, "query": 3, "path": 4}


def encode(message: str, value: Any) -> bytes:
    """The wire bytes of ``value`` (decoded JSON) as the gnostic message named ``message``; keys the
    message has no field for are left out (kubesim's documents use none)."""
    special = _SPECIAL.get(message)
    if special is not None:
        return special(value)
    if message in _MAPS:
        return b"".join(_named(1, name, encode(_MAPS[message], item)) for name, item in value.items())
    fields = _MESSAGES[message]
    out = bytearray()
    for key, item in value.items():
        spec = fields.get("x-" if key.startswith("x-") else key)
        if spec is None:
            continue
        number, kind = spec
        if kind == "ext":
            out += _named(number, key, any_message(item))
        else:
            out += _field(number, kind, item)
    return bytes(out)


def _field(number: int, kind: str, item: Any) -> bytes:
    if kind == "str":
        return _string(number, item)
    if kind == "bool":
        return _bool(number, item)
    if kind == "int":
        return _int(number, item)
    if kind == "num":
        return _double(number, item)
    if kind == "strs":
        return b"".join(_len_field(number, str(v).encode()) for v in item)
    if kind == "any":
        return _len_field(number, any_message(item))
    if kind == "anys":
        return b"".join(_len_field(number, any_message(v)) for v in item)
    if kind.endswith("*"):
        return b"".join(_len_field(number, encode(kind[:-1], v)) for v in item)
    return _len_field(number, encode(kind, item))


def _extensions(number: int, value: Obj) -> bytes:
    return b"".join(_named(number, k, any_message(v)) for k, v in value.items() if k.startswith("x-"))


def _paths(value: Obj) -> bytes:
    named = b"".join(
        _named(2, path, encode("PathItem", item)) for path, item in value.items() if not path.startswith("x-")
    )
    return _extensions(1, value) + named


def _responses(value: Obj) -> bytes:
    named = b"".join(
        _named(1, code, encode("ResponseValue", item))
        for code, item in value.items()
        if not code.startswith("x-")
    )
    return named + _extensions(2, value)


def _parameters_item(value: Obj) -> bytes:
    if "$ref" in value:
        return _len_field(2, encode("JsonReference", value))
    return _len_field(1, encode("Parameter", value))


def _parameter(value: Obj) -> bytes:
    if value.get("in") == "body":
        return _len_field(1, encode("BodyParameter", value))
    return _len_field(2, encode("NonBodyParameter", value))


def _non_body(value: Obj) -> bytes:
    where = value.get("in", "query")
    message = {"header": "HeaderParameterSubSchema", "formData": "FormDataParameterSubSchema"}.get(where)
    message = message or ("PathParameterSubSchema" if where == "path" else "QueryParameterSubSchema")
    return _len_field(_NON_BODY.get(where, 3), encode(message, value))


def _response_value(value: Obj) -> bytes:
    if "$ref" in value:
        return _len_field(2, encode("JsonReference", value))
    return _len_field(1, encode("Response", value))


def _schema_item(value: Obj) -> bytes:
    return _len_field(1, encode("Schema", value))


def _additional(value: Any) -> bytes:
    if isinstance(value, bool):
        return _bool(2, value, always=True)
    return _len_field(1, encode("Schema", value))


def _type_item(value: Any) -> bytes:
    values = [value] if isinstance(value, str) else value
    return b"".join(_len_field(1, str(v).encode()) for v in values)


def _items_item(value: Any) -> bytes:
    values = value if isinstance(value, list) else [value]
    return b"".join(_len_field(1, encode("Schema", v)) for v in values)


def _security_item(value: Obj) -> bytes:
    kind = value.get("type", "apiKey")
    message = "BasicAuthenticationSecurity" if kind == "basic" else "ApiKeySecurity"
    return _len_field(_SECURITY.get(kind, 2), encode(message, value))


def _security_requirement(value: Obj) -> bytes:
    return b"".join(_named(1, name, _field(1, "strs", scopes)) for name, scopes in value.items())


def _examples(value: Obj) -> bytes:
    return b"".join(_named(1, k, any_message(v)) for k, v in value.items())


_SPECIAL: dict[str, Encoder] = {
    "Paths": _paths,
    "Responses": _responses,
    "ParametersItem": _parameters_item,
    "Parameter": _parameter,
    "NonBodyParameter": _non_body,
    "ResponseValue": _response_value,
    "SchemaItem": _schema_item,
    "AdditionalPropertiesItem": _additional,
    "TypeItem": _type_item,
    "ItemsItem": _items_item,
    "SecurityDefinitionsItem": _security_item,
    "SecurityRequirement": _security_requirement,
    "Examples": _examples,
}


def document(swagger: Obj) -> bytes:
    """The whole ``openapi.v2.Document`` for a swagger 2.0 document given as decoded JSON."""
    return encode("Document", swagger)
