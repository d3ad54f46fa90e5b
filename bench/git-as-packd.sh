#!/usr/bin/env bash
# A stand-in for the packd binary that runs git instead, to check the benchmark harness
# itself: `PACKD=bench/git-as-packd.sh bench/odb.sh` must print MATCH and ratios near 1.0.
# Understands packd's CLI as bench/odb.sh uses it:
#   [-C DIR] [--cache-size BYTES] [--stats] cat-file ARGS...  -> git [-C DIR] cat-file ARGS...
#   [-C DIR] ... verify [--threads N] PATH.pack|PATH.idx...   -> git [-C DIR] verify-pack PATH.idx...
set -euo pipefail
git=(git)
while (($#)); do
  case $1 in
    -C) git+=(-C "$2"); shift 2 ;;
    --cache-size) shift 2 ;;
    --cache-size=*|--stats) shift ;;
    *) break ;;
  esac
done
cmd=${1:?usage: $0 [-C DIR] [--cache-size N] [--stats] cat-file|verify ARGS...}
shift
case $cmd in
  cat-file) exec "${git[@]}" cat-file "$@" ;;
  verify)
    idx=()
    while (($#)); do
      case $1 in
        --threads) shift 2 ;;
        --threads=*|--stats) shift ;;
        *.pack) idx+=("${1%.pack}.idx"); shift ;;
        *) idx+=("$1"); shift ;;
      esac
    done
    exec "${git[@]}" verify-pack "${idx[@]}" ;;
  *) echo "git-as-packd: unknown command $cmd" >&2; exit 2 ;;
esac
