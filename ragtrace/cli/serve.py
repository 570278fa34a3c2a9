"""`ragtrace serve`: run the scoring gateway until SIGTERM or SIGINT, then flush and exit.

Settings come from `RAGTRACE_*` variables (`RagtraceSettings`); a flag given on the command line wins.
The next hop is the SDK's usual `OTEL_EXPORTER_OTLP_*` configuration unless `--exporter-endpoint` is given.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

from ragtrace._logs import ragtrace_logger

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    from ragtrace.gateway import Gateway
    from ragtrace.gateway.receivers import ReceiverLimits
    from ragtrace.gateway.security import ReceiverSecurity
    from ragtrace.gateway.spool import Spool
    from ragtrace.live.otlp import MetricsOutlet
    from ragtrace.live.settings import RagtraceSettings

logger = ragtrace_logger("ragtrace.gateway")


def add_parser(subcommands: Any) -> argparse.ArgumentParser:
    """Add `serve` to the `ragtrace` command's subcommands."""
    parser: argparse.ArgumentParser = subcommands.add_parser(
        "serve",
        help="run the scoring gateway: OTLP in (gRPC, HTTP), score, OTLP out",
        description="Receive OTLP traces, score RAG retrievals, forward every span to the next hop "
        "(OTEL_EXPORTER_OTLP_* or --exporter-endpoint). Settings default to RAGTRACE_* variables.",
    )
    _add_listening_options(parser)
    _add_scoring_options(parser)
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument(
        "--stats-interval", type=float, default=60.0,
        help="seconds between INFO lines with the received / forwarded / scored counts (default 60)",
    )
    parser.set_defaults(func=run)
    return parser


def _add_listening_options(parser: argparse.ArgumentParser) -> None:
    net = parser.add_argument_group("listening")
    net.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 for all)")
    net.add_argument("--grpc-port", type=int, default=4317, help="OTLP gRPC port (default 4317; -1 disables)")
    net.add_argument(
        "--http-port", type=int, default=4318, help="OTLP HTTP port, also /healthz (default 4318; -1 disables)"
    )
    net.add_argument("--health-port", type=int, default=None, help="an extra port serving only GET /healthz")
    limits = parser.add_argument_group("limits per client (a hostile or broken client costs at most these)")
    limits.add_argument("--max-request-mib", type=float, default=64.0,
                        help="largest request body, on the wire and decompressed (default 64)")
    limits.add_argument("--max-connections", type=int, default=256, help="open connections per port (default 256)")
    limits.add_argument("--max-concurrent-requests", type=int, default=8,
                        help="requests decoded at once per transport; bounds request memory (default 8)")
    limits.add_argument("--idle-timeout", type=float, default=60.0, help="seconds before an idle connection closes")
    limits.add_argument("--read-timeout", type=float, default=10.0,
                        help="seconds a request may send nothing before it is dropped (default 10)")
    security = parser.add_argument_group("security (default: plain, unauthenticated, on 127.0.0.1)")
    security.add_argument("--tls-cert", default=os.environ.get("RAGTRACE_GATEWAY_TLS_CERT") or None,
                          help="PEM certificate for TLS on both ports (env RAGTRACE_GATEWAY_TLS_CERT)")
    security.add_argument("--tls-key", default=os.environ.get("RAGTRACE_GATEWAY_TLS_KEY") or None,
                          help="its PEM private key (env RAGTRACE_GATEWAY_TLS_KEY)")
    security.add_argument("--auth-token", default=os.environ.get("RAGTRACE_GATEWAY_TOKEN") or None,
                          help="require `Authorization: Bearer <token>` (env RAGTRACE_GATEWAY_TOKEN; prefer the "
                          "variable: a flag shows in the process list)")
    security.add_argument("--auth-header", default=os.environ.get("RAGTRACE_GATEWAY_HEADER") or None,
                          help="require this header instead, as name=value (env RAGTRACE_GATEWAY_HEADER)")
    out = parser.add_argument_group("forwarding")
    out.add_argument("--exporter-endpoint", default=None, help="next hop (default: OTEL_EXPORTER_OTLP_ENDPOINT)")
    out.add_argument(
        "--exporter-protocol", choices=("grpc", "http/protobuf"), default=None,
        help="next hop's protocol (default: OTEL_EXPORTER_OTLP_PROTOCOL, else grpc)",
    )
    out.add_argument(
        "--metrics-endpoint", default=os.environ.get("RAGTRACE_GATEWAY_METRICS_ENDPOINT") or None,
        help="where ragtrace's own metrics go: a URL, or 'none' to turn them off (env "
        "RAGTRACE_GATEWAY_METRICS_ENDPOINT; default: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, else the next hop; "
        "OTEL_METRICS_EXPORTER=none also turns them off). A traces-only next hop (Phoenix) needs one of these",
    )
    out.add_argument(
        "--metrics-protocol", choices=("grpc", "http/protobuf"), default=None,
        help="the metrics endpoint's protocol (default: OTEL_EXPORTER_OTLP_METRICS_PROTOCOL, else the next hop's)",
    )
    spool = parser.add_argument_group(
        "spool (keeps acknowledged spans on disk until the next hop has them; replayed after a crash)"
    )
    spool.add_argument("--spool-dir", default=os.environ.get("RAGTRACE_GATEWAY_SPOOL_DIR") or None,
                       help="directory of the spool's SQLite database (env RAGTRACE_GATEWAY_SPOOL_DIR; default: "
                       "no spool, a killed gateway loses the spans it held)")
    spool.add_argument("--spool-max-mib", type=float,
                       default=_env_or("RAGTRACE_GATEWAY_SPOOL_MAX_MIB", 1024.0),
                       help="largest spool; when full, requests are refused with 503 / UNAVAILABLE and clients "
                       "retry (env RAGTRACE_GATEWAY_SPOOL_MAX_MIB; default 1024)")
    spool.add_argument("--spool-sync", choices=("full", "normal"),
                       default=os.environ.get("RAGTRACE_GATEWAY_SPOOL_SYNC") or "full",
                       help="full: every request is synced to disk before it is answered (survives a machine "
                       "crash); normal: survives the process's crash only, cheaper (env RAGTRACE_GATEWAY_SPOOL_SYNC)")


def _add_scoring_options(parser: argparse.ArgumentParser) -> None:
    scoring = parser.add_argument_group("scoring (default: the RAGTRACE_* variable, else its default)")
    from ragtrace.live.settings_rows import SERVE_FLAGS, add_setting_flags

    add_setting_flags(scoring, SERVE_FLAGS, env=True)
    scoring.add_argument(
        "--trace-settle", type=float, default=1.0,
        help="seconds a trace's root is held so that children exported after it join the trace (default 1.0)",
    )


def _env_or(name: str, default: float) -> float | str:
    """A variable's value for argparse to check like the flag (a bad one reads as the flag's error)."""
    return os.environ.get(name) or default


def _port(value: int | None) -> int | None:
    """A negative port disables its transport."""
    return None if value is not None and value < 0 else value


def settings_of(args: argparse.Namespace) -> RagtraceSettings:
    """`RAGTRACE_*` settings with the flags given on the command line applied, checked like the variables.
    `session_exemplars` is on unless RAGTRACE_SESSION_EXEMPLARS says otherwise: serve builds its own
    MeterProvider, with `metric_views()`, so the session reaches the exemplars and never a series."""
    from ragtrace.live.settings import RagtraceSettings, as_flag
    from ragtrace.live.settings_rows import SERVE_FLAGS

    settings = RagtraceSettings.from_env()
    overrides: dict[str, Any] = {
        name: getattr(args, name) for name in SERVE_FLAGS if getattr(args, name, None) is not None
    }
    if "session_exemplars" not in settings.model_fields_set:
        overrides["session_exemplars"] = True
    return settings.with_overrides(overrides, as_flag)


def limits_of(args: argparse.Namespace) -> ReceiverLimits:
    from ragtrace.gateway.receivers import ReceiverLimits

    return ReceiverLimits(
        max_request_bytes=int(args.max_request_mib * 1024 * 1024), max_connections=args.max_connections,
        max_concurrent_requests=args.max_concurrent_requests, idle_timeout=args.idle_timeout,
        read_timeout=args.read_timeout,
    )


def security_of(args: argparse.Namespace) -> ReceiverSecurity:
    from ragtrace.gateway.security import ReceiverSecurity

    return ReceiverSecurity.of(
        tls_cert=args.tls_cert, tls_key=args.tls_key, bearer_token=args.auth_token, header=args.auth_header
    )


def spool_of(args: argparse.Namespace) -> Spool | None:
    """The spool `--spool-dir` asks for (None without one); ValueError for a bad size or directory."""
    if not args.spool_dir:
        return None
    from ragtrace.gateway.spool import Spool

    if not args.spool_max_mib > 0:
        raise ValueError(f"--spool-max-mib must be above 0, got {args.spool_max_mib!r}")
    return Spool(args.spool_dir, int(args.spool_max_mib * 1024 * 1024), synchronous=args.spool_sync)


_OFF = ("none", "off")


def metrics_outlet_of(args: argparse.Namespace) -> MetricsOutlet | None:
    """ragtrace's own metrics exporter as the flags and variables say; None when they are turned off."""
    from ragtrace.live.otlp import otlp_metrics_outlet

    endpoint = args.metrics_endpoint.strip() if args.metrics_endpoint is not None else None
    if endpoint is not None and endpoint.lower() in (*_OFF, ""):
        return None
    if endpoint is None:
        if os.environ.get("OTEL_METRICS_EXPORTER", "").strip().lower() == "none":  # the SDK's own switch
            return None
        if not os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
            endpoint = args.exporter_endpoint
    protocol = args.metrics_protocol
    if protocol is None and not os.environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"):
        protocol = args.exporter_protocol
    return otlp_metrics_outlet(endpoint, protocol)


# The flag to change when a port is taken, by transport.
_PORT_FLAGS = {"OTLP gRPC": "--grpc-port", "OTLP HTTP": "--http-port", "health checks": "--health-port"}


def _problem(exc: Exception) -> str:
    """One line for a setting or port the gateway cannot start with; a taken port says which flag moves it."""
    from ragtrace.gateway.receivers import CannotListen

    if isinstance(exc, CannotListen):
        line = str(exc.strerror)
        if exc.taken:
            flag = _PORT_FLAGS.get(exc.what, "--grpc-port / --http-port")
            line += (f" (another collector, or Phoenix, listens there?): choose a free one with {flag} PORT, "
                     f"or {flag} -1 to turn that listener off")
        return line
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def replica_resource() -> Resource:
    """The SDK's resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), with a `service.instance.id` of its
    own when none is set: replicas behind one Collector otherwise share one identity, and its Prometheus
    exporter keeps only the last replica's write of each series."""
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create()
    if "service.instance.id" in resource.attributes:
        return resource
    return resource.merge(Resource({"service.instance.id": str(uuid.uuid4())}))


def run(args: argparse.Namespace) -> int:
    """Start the gateway, serve until SIGTERM/SIGINT, shut down with a flush. 0 on a clean stop, 2 on bad settings."""
    from ragtrace.gateway import Gateway
    from ragtrace.live.heap import freeze_startup_heap

    _configure_logging(str(args.log_level).upper())
    meter_provider: MeterProvider | None = None
    outlet: MetricsOutlet | None = None
    spool = None
    try:
        settings = settings_of(args)
        limits, security = limits_of(args), security_of(args)
        if (outlet := metrics_outlet_of(args)) is not None:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            from ragtrace.live.metrics import views

            meter_provider = MeterProvider(
                metric_readers=[PeriodicExportingMetricReader(outlet)], resource=replica_resource(), views=views()
            )
        spool = spool_of(args)
        gateway = Gateway(
            settings, host=args.host, grpc_port=_port(args.grpc_port), http_port=_port(args.http_port),
            health_port=args.health_port, exporter_endpoint=args.exporter_endpoint,
            exporter_protocol=args.exporter_protocol, trace_settle=args.trace_settle, meter_provider=meter_provider,
            limits=limits, security=security, spool=spool,
        )
    except (ValueError, OSError, RuntimeError, ImportError) as exc:  # ImportError: the local judge's model
        print(f"ragtrace serve: {_problem(exc)}", file=sys.stderr)
        if outlet is not None and meter_provider is not None:
            outlet.off = True  # it never served: a last export would only add noise
            meter_provider.shutdown(timeout_millis=1000)
        if spool is not None:
            spool.close()
        return 2
    freeze_startup_heap(settings.judge)
    _serve_until_signalled(gateway, settings, meter_provider, args.stats_interval)
    print(f"ragtrace serve: stopped {gateway.health()}", flush=True)
    return 0


def _configure_logging(level: str) -> None:
    """The gateway's own lines at `level`; the drift scheduler's per-run chatter only at DEBUG."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("apscheduler").setLevel(logging.WARNING)


def _log_counts(gateway: Gateway, last: dict[str, Any]) -> dict[str, Any]:
    """One INFO line with what the gateway did, when anything changed since `last`."""
    health = gateway.health()
    keys = ("received_spans", "rejected_spans", "forwarded_spans", "failed_spans", "decisions", "spool")
    counts = {key: health.get(key) for key in keys}
    if counts != last:
        spool = health.get("spool")
        logger.info(
            "ragtrace gateway: received %d spans (%d rejected), forwarded %d (%d failed), held %d; decisions %s%s",
            health["received_spans"], health["rejected_spans"], health["forwarded_spans"], health["failed_spans"],
            health["held_spans"], health["decisions"] or "{}",
            "" if spool is None else (
                f"; spool: {spool['spans']} spans stored ({spool['bytes']} of {spool['max_bytes']} bytes), "
                f"{spool['duplicate_spans']} duplicates received, {spool['replayed_maybe_delivered_spans']} "
                f"replayed spans possibly delivered before, {spool['refused_spans']} refused when full"
            ),
        )
    return counts


def _serve_until_signalled(
    gateway: Gateway, settings: RagtraceSettings, meter_provider: MeterProvider | None, stats_interval: float
) -> None:
    # A signal handler must take no lock: a second signal (`timeout` sends two) re-enters the handler in
    # the main thread, and a handler blocked on a lock the interrupted code holds never returns. So the
    # handler does nothing; Python's C-level handler writes the signal number to a pipe
    # (`signal.set_wakeup_fd`), which the main loop waits on.
    wake_read, wake_write = os.pipe()
    for fd in (wake_read, wake_write):
        os.set_blocking(fd, False)
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _ignore_here)
    previous_wakeup = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    try:
        gateway.start()
        # One line a supervisor (or a test) can wait for; ports are the bound ones (0 picks a free port).
        print(
            f"ragtrace serve: listening grpc={gateway.grpc_port or '-'} http={gateway.http_port or '-'} "
            f"health={gateway.health_port or '-'} judge={settings.judge} sample_rate={settings.sample_rate}",
            flush=True,
        )
        counts: dict[str, Any] = {}
        next_stats = time.monotonic() + stats_interval
        while not _signalled(wake_read, max(next_stats - time.monotonic(), 0.0)):
            if time.monotonic() >= next_stats:
                counts = _log_counts(gateway, counts)
                next_stats = time.monotonic() + stats_interval
        print("ragtrace serve: stopping, flushing held spans", flush=True)
    finally:
        gateway.shutdown()  # signals arriving meanwhile only write to the pipe
        if meter_provider is not None:
            meter_provider.shutdown()  # the last metric export, after the processor's final counts
        signal.set_wakeup_fd(previous_wakeup)
        # Stopped: further stop signals are ignored, not handed back to their default action, which would
        # kill the process (exit -15 / -2) after a clean stop. SIG_IGN also outlives the interpreter's
        # finalization, which resets Python-level handlers to the default.
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        os.close(wake_read)
        os.close(wake_write)


def _ignore_here(signum: int, frame: object) -> None:
    """The Python-level handler: nothing (the wakeup pipe carries the signal to the main loop)."""


_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def _signalled(wake_read: int, timeout: float) -> bool:
    """Whether SIGTERM or SIGINT arrived, waiting up to `timeout` seconds on the wakeup pipe."""
    readable, _, _ = select.select([wake_read], [], [], timeout)
    if not readable:
        return False
    try:
        received = os.read(wake_read, 512)
    except BlockingIOError:
        return False
    return any(number in _STOP_SIGNALS for number in received)


__all__ = ["add_parser", "limits_of", "run", "security_of", "settings_of"]
