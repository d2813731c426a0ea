#!/usr/bin/env bash
# scripts/duckdb.sh: install the independent readers that filesink's tests
# read files back with, and print the python that runs them.
#
# A virtualenv (python3 -m venv) with packages from PyPI, pinned below:
#   duckdb     reads Parquet (read_parquet) and JSON lines (read_json, also
#              zstd-compressed); its Avro extension is downloaded from
#              DuckDB's own site at INSTALL, which is not reachable here, so
#   fastavro   reads Avro object container files (null, snappy and
#              zstandard codecs), with
#   cramjam    snappy (fastavro's snappy codec; also the framed snappy of
#              .jsonl.sz files, which DuckDB does not read) and
#   backports.zstd  fastavro's zstandard codec (Python 3.14's
#              compression.zstd, for older pythons).
# None of them shares code with the Go libraries that write the files.
#
# Usage: scripts/duckdb.sh
#   installs the venv if it is not complete (a no-op when it is), then
#   prints the venv's python (an absolute path) as the only line of stdout;
#   progress and errors go to stderr, and a failed install exits non-zero.
#
# Environment (all optional):
#   KORD_DUCKDB_DIR   the venv (default $KORD_CACHE/duckdb, KORD_CACHE
#                     defaulting to $HOME/.cache/kord); it is replaced when
#                     its pins differ from this script's
#   PYTHON            the python3 that makes the venv (default python3)
set -euo pipefail

# The pins. Editing them reinstalls.
PINS=(duckdb==2.0.1 fastavro==1.13.1 cramjam==2.14.0 backports.zstd==1.8.0)

CACHE_ROOT=${KORD_CACHE:-${HOME:-/tmp}/.cache/kord}
VENV=$(realpath -m "${KORD_DUCKDB_DIR:-$CACHE_ROOT/duckdb}")
PY=$VENV/bin/python
STAMP=$VENV/.complete

# What the tests need works: DuckDB answers, and fastavro reads back a
# file of each codec (a codec's library missing fails only at a read).
SMOKE='
import io, duckdb, fastavro
assert duckdb.sql("select 1").fetchall() == [(1,)]
schema = {"type": "record", "name": "r", "fields": [{"name": "x", "type": "long"}]}
for codec in ("null", "snappy", "zstandard"):
    b = io.BytesIO()
    fastavro.writer(b, schema, [{"x": 1}], codec=codec)
    b.seek(0)
    assert list(fastavro.reader(b)) == [{"x": 1}], codec
'

log() { echo "duckdb.sh: $*" >&2; }
die() { log "$*"; exit 1; }

stamp() { echo "${PINS[*]}"; }
installed() { [[ -x $PY && -f $STAMP && "$(cat "$STAMP")" == "$(stamp)" ]]; }

install() {
    installed && return 0
    local python=${PYTHON:-python3}
    command -v "$python" >/dev/null || die "$python is needed to make the venv"
    mkdir -p "$(dirname "$VENV")"
    # One install at a time; a concurrent caller waits, then finds the venv
    # complete.
    exec 8>"$VENV.lock"
    flock 8
    if ! installed; then
        log "installing ${PINS[*]} into $VENV"
        local t0=$SECONDS logf=$VENV.log
        # Made at its final path (a venv's scripts name it), cleared first;
        # the stamp, written last, says it is complete.
        rm -rf "$VENV"
        if ! { "$python" -m venv "$VENV" &&
            "$PY" -m pip install --quiet --no-input "${PINS[@]}" &&
            "$PY" -c "$SMOKE"; } >"$logf" 2>&1; then
            tail -n 40 "$logf" >&2
            rm -rf "$VENV"
            die "installing ${PINS[*]} failed (full output: $logf)"
        fi
        stamp >"$STAMP"
        log "installed in $((SECONDS - t0))s"
    fi
    exec 8>&-
}

case ${1:-} in
"") install && echo "$PY" ;;
*)
    echo "usage: $0  (see the top of this file)" >&2
    exit 2
    ;;
esac
