# The packd binary the benchmarks run (sourced).

# Sets `packd`: PACKD when it is given, else packd's release build in the checkout ROOT, built
# (or brought up to date) first: target/<host triple>/release/packd, since .cargo/config.toml
# builds for the host's triple named explicitly (x86_64 Linux gets a static binary that way).
# Called at a script's top level, not in `$(...)`: a failed build then stops the script.
set_packd_binary() {
  local root=$1 host
  if [[ -n ${PACKD:-} ]]; then
    packd=$PACKD
    return
  fi
  host=$(rustc -vV | sed -n 's/^host: //p')
  [[ -n $host ]] || { echo "error: rustc -vV names no host triple" >&2; exit 1; }
  (cd "$root" && cargo build --release -p packd) >&2 || { echo "error: the build failed" >&2; exit 1; }
  packd=${CARGO_TARGET_DIR:-$root/target}/$host/release/packd
}
