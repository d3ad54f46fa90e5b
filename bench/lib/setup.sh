# Common start of the benchmarks that take one repository argument (fetch.sh, push.sh):
# sourced after the caller set `here` (the bench/ directory). Sets root, packd (a copy of PACKD
# or of the release build, brought up to date first) and data (bench/data, with results/), checks that one
# REPO argument was given, and loads bitmapped_copy (lib/copies.sh).
[[ $# -eq 1 ]] || { echo "usage: bench/$(basename "$0") REPO" >&2; exit 2; }
root=$(cd "$here/.." && pwd)
# shellcheck source=release.sh
source "$here/lib/release.sh"
set_packd_binary "$root"
data=$here/data
mkdir -p "$data/results"
export GIT_CONFIG_NOSYSTEM=1 GIT_OPTIONAL_LOCKS=0
# shellcheck source=copies.sh
source "$here/lib/copies.sh"
packd=$(installed_copy "$packd" packd)
