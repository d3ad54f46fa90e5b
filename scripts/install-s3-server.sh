#!/usr/bin/env bash
# Installs the S3-compatible server that packd's object-storage tests start on 127.0.0.1:
# the Versity S3 gateway (versitygw, Apache-2.0), pinned, built from the Go module proxy with
# `go install` into a cache that later runs reuse:
#
#   CACHE/versitygw-VERSION/bin/versitygw   the server
#   CACHE/versitygw-VERSION/ready           the hash of this script, once the build passed
#
# CACHE is $1, else $PACKD_TEST_S3_DIR, else ~/.cache/packd-test-s3. The build (about 2.5
# minutes on 2 cores) is redone only when this script changes; otherwise the script prints
# "versitygw: ready" and the binary's path at once. It runs under a lock, so concurrent runs
# (several test binaries) wait for each other and build once. The last line printed is the
# binary's path; the exit status is 1 when the build failed (its log's end is printed).
#
# Why versitygw: of the servers tried (shared notes on S3 servers), it honoured `If-None-Match: *`
# and `If-Match` atomically under 8 racing writers every round, answers conditional writes in
# milliseconds, and starts in a tenth of a second over a plain directory. It is a gateway over
# one machine's filesystem: a test server, not the distributed store a host would run.
set -uo pipefail

version="v1.8.0"
module="github.com/versity/versitygw/cmd/versitygw"
cache="${1:-${PACKD_TEST_S3_DIR:-$HOME/.cache/packd-test-s3}}"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

dir="$cache/versitygw-$version"
want="$(sha256sum "$0" | cut -d' ' -f1)"
if [ "$(cat "$dir/ready" 2>/dev/null)" = "$want" ] && [ -x "$dir/bin/versitygw" ]; then
    echo "versitygw: ready"
    echo "$dir/bin/versitygw"
    exit 0
fi

start=$SECONDS
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp/bin"
# GOBIN puts the binary in the cache; the module and build caches are Go's own (GOMODCACHE,
# GOCACHE), so a rebuild after a change of this script downloads nothing.
if GOBIN="$dir.tmp/bin" GOFLAGS=-trimpath nice go install "$module@$version" \
    >"$cache/versitygw.log" 2>&1 && "$dir.tmp/bin/versitygw" --version >>"$cache/versitygw.log" 2>&1; then
    echo "$want" >"$dir.tmp/ready"
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    echo "versitygw: installed in $((SECONDS - start)) s"
    echo "$dir/bin/versitygw"
else
    echo "versitygw: FAILED (log: $cache/versitygw.log):" >&2
    tail -n 20 "$cache/versitygw.log" >&2
    exit 1
fi
