#!/bin/sh
# Runs the librdkafka peer (see README.md): builds it into bin/ when the binary
# is missing or older than a source file, then execs it with every argument,
# so that the process the suite starts is the peer itself.
set -e
dir=$(cd "$(dirname "$0")" && pwd)
bin="$dir/bin/librdkafka"
if [ ! -x "$bin" ] || [ -n "$(find "$dir" -maxdepth 1 \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$bin")" ]; then
	(cd "$dir" && GOWORK=off go build -o "$bin" .) >&2
fi
exec "$bin" "$@"
