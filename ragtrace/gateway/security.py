"""Receive-side security for the gateway: optional TLS and a required header (a bearer token by default).

One `ReceiverSecurity` serves both transports: the HTTP receiver wraps each accepted connection in the
TLS context and checks the header before it reads a body; the gRPC receiver binds a secure port and an
interceptor refuses calls without the header (UNAUTHENTICATED). Values are compared in constant time and
never logged.
"""

from __future__ import annotations

import hmac
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")


@dataclass(frozen=True)
class ReceiverSecurity:
    """TLS (`tls_cert` and `tls_key`, PEM files) and a required header (`required_header`: name, value).

    Either part is optional; with neither, the receivers accept plain, unauthenticated OTLP (the default,
    on the loopback address).
    """

    tls_cert: Path | None = None
    tls_key: Path | None = None
    required_header: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both a certificate and its private key (--tls-cert and --tls-key)")
        for path in (self.tls_cert, self.tls_key):
            if path is not None and not Path(path).is_file():
                raise ValueError(f"TLS file not found: {path}")
        if self.required_header is not None:
            name, value = self.required_header
            if not _HEADER_NAME.match(name):
                raise ValueError(f"not a valid header name: {name!r}")
            if not value:
                raise ValueError(f"the required header {name!r} needs a non-empty value")
            object.__setattr__(self, "required_header", (name.lower(), value))

    @classmethod
    def of(
        cls,
        *,
        tls_cert: str | Path | None = None,
        tls_key: str | Path | None = None,
        bearer_token: str | None = None,
        header: str | None = None,
    ) -> ReceiverSecurity:
        """From options as an operator gives them: `bearer_token` means `Authorization: Bearer <token>`,
        `header` is `name=value` (or `name: value`); at most one of the two."""
        if bearer_token and header:
            raise ValueError("give either a bearer token or a required header, not both")
        required: tuple[str, str] | None = None
        if bearer_token:
            required = ("authorization", f"Bearer {bearer_token}")
        elif header:
            name, sep, value = header.partition("=") if "=" in header else header.partition(":")
            if not sep:
                raise ValueError("the required header must be given as name=value")
            required = (name.strip(), value.strip())
        return cls(
            Path(tls_cert) if tls_cert else None, Path(tls_key) if tls_key else None, required
        )

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def authorized(self, header: Callable[[str], str | None]) -> bool:
        """Whether a request carries the required header; `header(name)` looks one up (None if absent)."""
        if self.required_header is None:
            return True
        name, expected = self.required_header
        given = header(name)
        return given is not None and hmac.compare_digest(given.strip().encode(), expected.encode())

    def ssl_context(self) -> ssl.SSLContext | None:
        """A server-side TLS context (TLS 1.2 or later), or None without TLS."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(str(self.tls_cert), str(self.tls_key))
        return context

    def grpc_credentials(self) -> grpc.ServerCredentials | None:
        if self.tls_cert is None or self.tls_key is None:
            return None
        return grpc.ssl_server_credentials([(self.tls_key.read_bytes(), self.tls_cert.read_bytes())])

    def grpc_interceptors(self) -> list[grpc.ServerInterceptor]:
        return [] if self.required_header is None else [_RequireHeader(self)]


class _RequireHeader(grpc.ServerInterceptor):  # type: ignore[misc]
    """Refuses a call whose metadata lacks the required header, before its message is handed on."""

    def __init__(self, security: ReceiverSecurity) -> None:
        self._security = security

    def intercept_service(self, continuation: Callable[[Any], Any], handler_call_details: Any) -> Any:
        metadata = dict(handler_call_details.invocation_metadata or ())
        if self._security.authorized(lambda name: _text(metadata.get(name))):
            return continuation(handler_call_details)
        return grpc.unary_unary_rpc_method_handler(_unauthenticated)


def _text(value: str | bytes | None) -> str | None:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _unauthenticated(request: Any, context: grpc.ServicerContext) -> None:
    context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong credentials for this gateway")


__all__ = ["ReceiverSecurity"]
