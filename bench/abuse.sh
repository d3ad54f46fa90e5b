#!/usr/bin/env bash
# packd serve under abuse, on the loopback only, bounded in time (about two minutes; it stops
# by itself): peak RSS under 24 and 256 concurrent 1 MB gzip bodies; under one request of each
# protocol argument flood (ls-refs peel/ref-prefix, repeated wants and haves); under 48
# clients sending bad credentials, with a good user's `git ls-remote` latency meanwhile and
# with no attack; and whether git from 127.0.0.1 is served within 2 s while silent or
# trickling sockets from 127.0.0.2 try to fill --max-connections. Targets (figures, not
# pass/fail): peak RSS at most 64 MB + 1 MB per connection; the good user at most 2x slower;
# the good client served in 2 s.
#
# Usage: bench/abuse.sh   (PACKD=PATH to run another binary; default the release build)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/release.sh"
set_packd_binary "$here/.."
ulimit -n 4096 2>/dev/null || true
exec timeout 330 python3 "$here/lib/abuse.py" "$packd"
