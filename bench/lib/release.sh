# The release build of packd, for the benchmarks (sourced).

# Builds packd's release binary in the checkout ROOT (nothing to do when it is up to date) and
# prints its path: target/<host triple>/release/packd, since .cargo/config.toml builds for the
# host's triple named explicitly (x86_64 Linux gets a static binary that way).
release_binary() {
  local root=$1 host
  host=$(rustc -vV | sed -n 's/^host: //p')
  (cd "$root" && cargo build --release -p packd) >&2
  echo "${CARGO_TARGET_DIR:-$root/target}/$host/release/packd"
}
