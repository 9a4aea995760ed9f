"""JSON-RPC 2.0's error codes and error objects, with seed 002 §15's error shape as data."""

from __future__ import annotations

from typing import Any, Final

__all__ = (
    "APPLICATION_ERROR",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "JsonId",
    "RpcError",
    "body_too_large",
    "error_response",
)

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
APPLICATION_ERROR: Final = -32000
JsonId = str | int | None


class RpcError(Exception):
    """A JSON-RPC error: its code, message and optional `data` (seed 002's error shape)."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    @classmethod
    def refused(
        cls, code: str, message: str, *, retryable: bool = False, **details: Any
    ) -> RpcError:
        """Seed 002's error shape under JSON-RPC's application error code."""
        shape = {"code": code, "message": message, "retryable": retryable, "details": details}
        return cls(APPLICATION_ERROR, message, shape)


def body_too_large(message: str) -> RpcError:
    """JSON-RPC's invalid request, with seed 002's error shape as its data."""
    text = f"Invalid Request: {message}"
    shape = {"code": "INVALID_REQUEST", "message": text, "retryable": False, "details": {}}
    return RpcError(INVALID_REQUEST, text, shape)


def error_response(error: RpcError, request_id: JsonId = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        body["data"] = error.data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}
