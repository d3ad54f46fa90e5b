#!/usr/bin/env bash
# Object-storage benchmark (issue 34, "What it must show"): packd serve --store on a bucket of a
# real S3 server (versitygw on 127.0.0.1, scripts/install-s3-server.sh) through a proxy adding
# 0, 2 and 20 ms per round trip (crates/packd-test-s3's DelayProxy), packd serve --root on local
# disk and git on local disk, in one run: a mirror clone, a branches-and-tags clone, fetches N
# days behind and a push of 8 commits; GETs and PUTs (versitygw's log), bytes fetched and bytes
# used (packd's access log, per request), server CPU, wall;
# cold and warm block cache; for the cold 20 ms fetch also a GET per range and sorting only.
# See bench/lib/store_bench.py.
#
# Usage: bench/store.sh REPO   e.g. bench/store.sh /work/.mirror/git+git/repo
#        (DELAYS=0,2,20, DAYS="1 8 32 128", RATE=100000000 bytes/s per proxied connection,
#         BLOCK_CACHE=1g for the bucket servers, FULL=0 for the bitmapped copy without
#         refs/pull/* instead of the one that keeps every ref but the broken ones,
#         PACKD=the release build)
# Copies live under bench/data (kept between runs); the bucket is made afresh in
# bench/data/store-tmp; the report goes to bench/data/results/store-DATE.txt. Run by hand,
# never in CI.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/setup.sh
source "$here/lib/setup.sh"

if [[ ${FULL:-1} == 1 ]]; then
  repo=$(full_copy "$1")
else
  repo=$(bitmapped_copy "$1" true)
fi
gw=$(bash "$root/scripts/install-s3-server.sh" | tail -n 1)
(cd "$root" && cargo build -q --release -p packd-test-s3 --example delay_proxy)
host=$(rustc -vV | sed -n 's/^host: //p')
proxy=${CARGO_TARGET_DIR:-$root/target}/$host/release/examples/delay_proxy
python3 "$here/lib/store_bench.py" "$packd" "$repo" "$gw" "$proxy" "$data/store-tmp" \
  | tee "$data/results/store-$(date -u +%Y%m%d-%H%M).txt"
