#!/usr/bin/env bash
# Coalesced-read benchmark (seed 004, issue 34): the ranges a fetch reads from a pack and its
# index, read from a real S3 server (versitygw on 127.0.0.1, from crates/packd-test-s3) through
# a proxy adding 0, 2 and 20 ms per round trip: a GET per range ("off"), sorted with only
# touching ranges joined ("sort-only", bzr's "sorted, 0"), neighbours merged under the
# measured latency x bandwidth ("merge"), and a second read through the block cache.
# Prints GETs, bytes fetched and used, wall time and the ratio to "off" per mode.
#
# Usage: bench/readv.sh [REPO]   (COMMITS=200 the fetch's depth, DELAYS=0,2,20)
# Without REPO, a synthetic repository of 3000 commits is made by bench/make-synthetic-repo.sh
# (git fast-import, then an aggressive repack) in bench/data/readv-synthetic.git.
# Target: at 20 ms, "merge" at least 3x faster than "off". Run by hand, never in CI.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=${1:-}
if [ -z "$repo" ]; then
  repo=$here/data/readv-synthetic.git
  COMMITS=3000 "$here/make-synthetic-repo.sh" "$repo" >&2
fi
# The dev profile by default: the run waits on round trips, not on this crate's code, and the
# dependencies (the HTTP client) are built at opt-level 2 in it too (the workspace's
# Cargo.toml); PROFILE=release for a release build.
profile=${PROFILE:-dev}
dir=$([[ $profile == dev ]] && echo debug || echo "$profile")
host=$(rustc -vV | sed -n 's/^host: //p')
(cd "$here/.." && cargo build -q --profile "$profile" -p packd-storage --features s3 --example readv)
"${CARGO_TARGET_DIR:-$here/../target}/$host/$dir/examples/readv" "$repo" "${COMMITS:-200}" "${DELAYS:-0,2,20}"
