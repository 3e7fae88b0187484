"""A grpcio method handler with its behaviour wrapped, for the server interceptors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc


def wrap_handler(handler: Any, wrap: Callable[[Callable[..., Any], bool], Any]) -> Any:
    """*handler* with each of its behaviours passed through ``wrap(behaviour, streaming)``."""
    if handler is None:
        return None
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            wrap(handler.unary_unary, False),
            handler.request_deserializer,
            handler.response_serializer,
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            wrap(handler.unary_stream, True),
            handler.request_deserializer,
            handler.response_serializer,
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            wrap(handler.stream_unary, False),
            handler.request_deserializer,
            handler.response_serializer,
        )
    return grpc.stream_stream_rpc_method_handler(
        wrap(handler.stream_stream, True),
        handler.request_deserializer,
        handler.response_serializer,
    )
