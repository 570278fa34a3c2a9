"""The gateway's listening sockets: the OTLP gRPC and HTTP receivers and the optional health port, bound
together (or not at all), started and stopped together, and the addresses they answer on."""

from __future__ import annotations

from ragtrace.gateway.receivers import GrpcReceiver, HttpReceiver, ReceiverLimits, TraceSink, url_host
from ragtrace.gateway.security import ReceiverSecurity


class Listeners:
    """Binds the ports at construction (0: a free one, None: that transport off); a port that cannot be
    bound closes the ones already bound and raises."""

    def __init__(
        self, sink: TraceSink, host: str, security: ReceiverSecurity, *, grpc_port: int | None,
        http_port: int | None, health_port: int | None, grpc_workers: int, limits: ReceiverLimits | None,
    ) -> None:
        self.host, self.security = host, security
        self.grpc: GrpcReceiver | None = None
        self.http: HttpReceiver | None = None
        self.health: HttpReceiver | None = None
        try:
            if grpc_port is not None:
                self.grpc = GrpcReceiver(sink, host, grpc_port, grpc_workers, limits=limits, security=security)
            if http_port is not None:
                self.http = HttpReceiver(sink, host, http_port, limits=limits, security=security)
            if health_port is not None:
                # Health stays unauthenticated (probes carry no credentials) but speaks TLS like the rest.
                health_security = ReceiverSecurity(security.tls_cert, security.tls_key)
                self.health = HttpReceiver(sink, host, health_port, otlp=False, limits=limits,
                                           security=health_security)
        except BaseException:
            self.stop()
            raise

    @property
    def all(self) -> list[GrpcReceiver | HttpReceiver]:
        return [r for r in (self.grpc, self.http, self.health) if r is not None]

    @property
    def ports(self) -> list[int]:
        return [r.port for r in self.all]

    def url(self, port: int | None) -> str:
        if port is None:
            raise RuntimeError("that transport is disabled")
        return f"{self.security.scheme}://{url_host(self.host)}:{port}"

    def start(self) -> None:
        for receiver in self.all:
            receiver.start()

    def stop(self, grace: float = 5.0) -> None:
        for receiver in self.all:
            receiver.stop(grace)


__all__ = ["Listeners"]
