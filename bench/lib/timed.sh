# Timing helpers of the shell benchmarks (sourced; expects $work, a scratch directory, to be set).

# Runs "$2..." under /usr/bin/time; appends "cpu wall rss_mb" to the file $1 (cpu = user+sys
# seconds, wall seconds, peak RSS in MB). Its stdout and stderr go to $work/stdout and
# $work/stderr; a failure prints them and exits.
timed() {
  local out=$1
  shift
  /usr/bin/time -f '%U %S %e %M' -o "$work/time" "$@" > "$work/stdout" 2> "$work/stderr" || {
    echo "failed: $*" >&2
    cat "$work/stderr" >&2
    exit 1
  }
  awk '{ printf "%.3f %.3f %.1f\n", $1 + $2, $3, $4 / 1024 }' "$work/time" >> "$out"
}

# Median of column $2 of file $1.
median() {
  sort -g -k"$2","$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END {
    if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
