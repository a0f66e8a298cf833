#!/usr/bin/env bash
# Keep database/<dialect>/<queue>.sql equal to what db_gen prints.
#
#   scripts/ddl.sh check <schema> <queue> <dialect>...   exit 1 when a file is stale or missing
#   scripts/ddl.sh write <schema> <queue> <dialect>...   regenerate the files
#
# A dialect is handled only when its directory database/<dialect>/ exists,
# except postgres, which is always handled (its file is part of the repository
# from the start). To add a dialect: mkdir database/<dialect> && make ddl.
# PYTHON names the interpreter that has nsj_queue_lib installed.
set -euo pipefail

usage() {
    echo "usage: $0 check|write <schema> <queue> <dialect>..." >&2
    exit 2
}

[ $# -ge 4 ] || usage
mode=$1 schema=$2 queue=$3
shift 3
case "$mode" in check|write) ;; *) usage ;; esac

python=${PYTHON:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

status=0
handled=0
for dialect in "$@"; do
    dir="database/$dialect"
    file="$dir/$queue.sql"
    if [ "$dialect" != postgres ] && [ ! -d "$dir" ]; then
        continue
    fi
    handled=$((handled + 1))
    # Render to a temporary file first: a failing generator must not leave
    # an empty or half-written file behind, and its exit code must count.
    if ! "$python" -m nsj_queue_lib.db_gen "$schema" "$queue" --dialect "$dialect" >"$tmp"; then
        echo "FAIL  $file: python -m nsj_queue_lib.db_gen $schema $queue --dialect $dialect failed" >&2
        status=1
        continue
    fi
    if [ "$mode" = write ]; then
        mkdir -p "$dir"
        if [ -f "$file" ] && cmp -s "$tmp" "$file"; then
            echo "ok    $file (unchanged)"
        else
            cp "$tmp" "$file"
            echo "wrote $file"
        fi
    elif [ ! -f "$file" ]; then
        echo "FAIL  $file is missing; run 'make ddl'" >&2
        status=1
    elif cmp -s "$tmp" "$file"; then
        echo "ok    $file matches db_gen --dialect $dialect"
    else
        echo "FAIL  $file differs from 'python -m nsj_queue_lib.db_gen $schema $queue --dialect $dialect'; run 'make ddl'" >&2
        diff -u "$file" "$tmp" | sed "s|$tmp|(db_gen output)|" | head -60 >&2 || true
        status=1
    fi
done

if [ "$handled" -eq 0 ]; then
    echo "no dialect handled (asked for: $*)" >&2
    exit 1
fi
exit "$status"
