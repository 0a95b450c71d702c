"""The refusal every app raises for input or an action it will not take, and the API turns into a 4xx."""

from __future__ import annotations

from collections.abc import Mapping


class Refused(Exception):
    """A request was refused; `errors` maps a field (or "" for the whole request) to messages, and `status`
    is the HTTP status the API answers with (400 unless said otherwise). `common.api.exception_handler`
    renders it in the API's one error shape, so views raise it and never catch it."""

    def __init__(self, errors: Mapping[str, list[str]], *, status: int = 400) -> None:
        self.errors = {field: list(messages) for field, messages in errors.items()}
        self.status = status
        super().__init__("; ".join(f"{k}: {m}" if k else m for k, ms in self.errors.items() for m in ms))
