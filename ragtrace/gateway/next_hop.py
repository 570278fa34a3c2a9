"""The gateway's next hop: the SDK's OTLP exporter behind a BatchSpanProcessor sized for a gateway."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ragtrace.live.otlp import otlp_span_exporter, otlp_target

_WILDCARDS = ("", "0.0.0.0", "::")


def _env_int(name: str, default: int) -> int | None:
    """None when the SDK's own OTEL_BSP_* variable is set (the SDK then reads it), else the gateway default."""
    return None if os.environ.get(name) else default


def otlp_exporting(endpoint: str | None = None, protocol: str | None = None) -> BatchSpanProcessor:
    """The next hop: the SDK's OTLP exporter (gRPC or http/protobuf) behind a BatchSpanProcessor.

    Unset arguments fall back to `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT` / `_PROTOCOL`, read by the SDK.
    The batch queue is larger and the delay shorter than an app's defaults (a gateway carries many apps'
    traffic); `OTEL_BSP_*` variables override both.
    """
    exporter = otlp_span_exporter(endpoint, protocol)
    return BatchSpanProcessor(
        exporter,
        max_queue_size=_env_int("OTEL_BSP_MAX_QUEUE_SIZE", 65_536),
        schedule_delay_millis=_env_int("OTEL_BSP_SCHEDULE_DELAY", 200),
        max_export_batch_size=_env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 2048),
    )


def next_hop_url(endpoint: str | None = None, protocol: str | None = None) -> str:
    """The traces endpoint the SDK's exporter will send to, resolved as the exporter resolves it."""
    protocol, endpoint = otlp_target("traces", endpoint, protocol)
    if endpoint:
        return endpoint
    if protocol == "grpc":
        return (
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or "http://localhost:4317"
        )
    if traces := os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return traces
    if base := os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return base.rstrip("/") + "/v1/traces"
    return "http://localhost:4318/v1/traces"


def _host_port(url: str, protocol: str) -> tuple[str, int]:
    """Host and port of an endpoint; a gRPC endpoint may come without a scheme (`localhost:4317`)."""
    parts = urlsplit(url if "//" in url else "//" + url)
    default = 4317 if protocol == "grpc" else (443 if parts.scheme == "https" else 80)
    return parts.hostname or "localhost", parts.port or default


def _addresses(host: str, port: int) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    found: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        found.add(address)
    return found


def _reaches(listen_host: str, target: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> bool:
    """Whether a connection to `target` lands on a socket listening on `listen_host`."""
    if listen_host in _WILDCARDS:
        # Bound to every interface: any address of this machine reaches it, 0.0.0.0 included.
        local = _addresses(socket.gethostname(), port)
        return target.is_loopback or target.is_unspecified or target in local
    listening = _addresses(listen_host, port)
    if target.is_unspecified:  # connecting to 0.0.0.0 / :: means this host's loopback
        return any(address.is_loopback for address in listening)
    return target in listening


def refuse_self_forwarding(
    endpoint: str | None, protocol: str | None, listen_host: str, listen_ports: Iterable[int]
) -> None:
    """ValueError when the next hop is one of the gateway's own listening addresses.

    Forwarding to itself loops: every request comes back, is forwarded again and multiplies. The check
    compares resolved addresses, so `localhost`, `127.0.0.1`, `::1` and `0.0.0.0` count as the same host.
    """
    resolved_protocol, _ = otlp_target("traces", endpoint, protocol)
    url = next_hop_url(endpoint, protocol)
    host, port = _host_port(url, resolved_protocol)
    if port not in set(listen_ports):
        return
    if any(_reaches(listen_host, target, port) for target in _addresses(host, port)):
        raise ValueError(
            f"the next hop {url} is this gateway's own listening address ({listen_host}:{port}): it would "
            "forward every span to itself. Point --exporter-endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT) at the "
            "collector or backend that receives the scored traces, or listen on other ports."
        )


__all__ = ["next_hop_url", "otlp_exporting", "refuse_self_forwarding"]
