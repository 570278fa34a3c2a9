#!/usr/bin/env bash
# Build the ragtrace Collector distribution (collector/builder-config.yaml, with the OpenTelemetry Collector
# Builder) and Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger) from the Go module proxy.
#
# Binaries land in a cache directory: the Collector under a key made from the manifest's bytes, Jaeger under
# its version. A binary already there is reused, so a second run costs a hash and two stats. The Go module
# and build caches live beside them, so deleting the directory is a true cold start.
#
#   collector/build.sh            build what is missing, then print   otelcol=<path>  and  jaeger=<path>
#
# Environment: RAGTRACE_COLLECTOR_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/ragtrace-collector), GOPROXY
# (the go command's default otherwise), GOTOOLCHAIN. Needs Go >= 1.26 (the v0.161.0 modules declare go 1.26).
set -euo pipefail

JAEGER_MODULE=github.com/jaegertracing/jaeger
JAEGER_VERSION=v1.76.0  # Jaeger v2 (the v1.x module tags carry the v2 binary)
OCB_MODULE=go.opentelemetry.io/collector/cmd/builder

here=$(cd "$(dirname "$0")" && pwd)
manifest=$here/builder-config.yaml

if ! command -v go >/dev/null 2>&1; then
    echo "collector/build.sh: the Go toolchain is missing (go >= 1.26, https://go.dev/dl/; Debian's golang-go" \
         "is too old): it builds the OpenTelemetry Collector and Jaeger from the Go module proxy" >&2
    exit 127
fi

cache=${RAGTRACE_COLLECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ragtrace-collector}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build GOFLAGS="-modcacherw -buildvcs=false" CGO_ENABLED=0

# The builder is the manifest's release (dist.version); the key covers every byte of the manifest.
ocb_version=v$(awk '$1 == "version:" {print $2; exit}' "$manifest")
key=$(sha256sum "$manifest" | cut -c1-16)
otelcol=$cache/otelcol-$key/otelcol-ragtrace
jaeger=$cache/jaeger-$JAEGER_VERSION/jaeger

log() { echo "collector/build.sh: $*" >&2; }

# One build at a time per cache (the CI script and a test may both ask); the loser finds the binary built.
exec 9>"$cache/.lock"
flock 9
rm -rf "$cache"/*.tmp  # what a build cut off (killed, out of disk) left; no build runs now

build_otelcol() {
    local work=$cache/otelcol-$key.tmp
    rm -rf "$work" && mkdir -p "$work"
    cp "$manifest" "$work/builder-config.yaml"
    GOBIN=$cache/bin-ocb-$ocb_version go install "$OCB_MODULE@$ocb_version"
    (cd "$work" && "$cache/bin-ocb-$ocb_version/builder" --config=builder-config.yaml --ldflags="-s -w") >&2
    mkdir -p "$(dirname "$otelcol")"
    mv "$work/otelcol-ragtrace/otelcol-ragtrace" "$otelcol.new" && mv "$otelcol.new" "$otelcol"
    cp "$manifest" "$(dirname "$otelcol")/builder-config.yaml"
    rm -rf "$work"
}

build_jaeger() {
    local work=$cache/jaeger-$JAEGER_VERSION.tmp
    rm -rf "$work" && mkdir -p "$work"
    (
        cd "$work"
        go mod init example.com/jaeger-build >/dev/null 2>&1
        go get -tool "$JAEGER_MODULE/cmd/jaeger@$JAEGER_VERSION"
        go build -trimpath -ldflags="-s -w" -o jaeger "$JAEGER_MODULE/cmd/jaeger"
    ) >&2
    mkdir -p "$(dirname "$jaeger")"
    mv "$work/jaeger" "$jaeger.new" && mv "$jaeger.new" "$jaeger"
    rm -rf "$work"
}

timed() {
    local what=$1 start=$SECONDS
    shift
    log "building $what (cold builds take minutes)"
    "$@"
    log "built $what in $((SECONDS - start)) s"
}

if [ -x "$otelcol" ]; then log "reusing $otelcol"; else timed "the Collector ($ocb_version)" build_otelcol; fi
if [ -x "$jaeger" ]; then log "reusing $jaeger"; else timed "Jaeger $JAEGER_VERSION" build_jaeger; fi

echo "otelcol=$otelcol"
echo "jaeger=$jaeger"
