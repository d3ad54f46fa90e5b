#!/usr/bin/env bash
# Runs each cargo-fuzz target briefly (default 60 s each): pack entry decoding and delta
# application. Installs cargo-fuzz and uses the nightly toolchain, which libFuzzer needs.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]
set -euo pipefail
seconds=${1:-60}
cd "$(dirname "$0")/../fuzz"
if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --help >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
for target in pack_entry delta; do
  echo "== fuzzing $target for ${seconds}s"
  cargo +nightly fuzz run "$target" -- -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10
done
echo "fuzzing finished: no crash in any target"
