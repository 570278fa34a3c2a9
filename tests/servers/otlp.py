"""A real OTLP receiver (gRPC and HTTP) on 127.0.0.1, built on opentelemetry-proto and grpcio, and its fixture."""
