#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time on its seed corpus.
# Usage: run_fuzzer.sh FUZZER SEED_CORPUS_DIR SECONDS
# New inputs go to a temporary directory (the seed corpus stays as it is).
# The whole log is kept: when the fuzzer fails (a crash, a sanitizer
# report, a leak, a timeout or running out of memory) the report is printed
# in full, from its first line on, and the failing input is left in the
# current directory (crash-*, leak-*, timeout-*, oom-*); when it passes,
# only the final lines (the stats) are printed.
set -u
fuzzer=$1 seeds=$2 seconds=$3
if [ ! -x "$fuzzer" ]; then
  echo "FAIL: $fuzzer was not built (scripts/setup configures build/fuzz)"
  exit 1
fi
if [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds")" ]; then
  echo "FAIL: no seed corpus in $seeds"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/fuzz.log
mkdir "$work/corpus"
# A bound on the whole run too: max_total_time is checked between inputs,
# and one input may hang (-timeout then reports it); this catches the rest.
timeout -k 10 $((seconds + 60)) \
  "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -malloc_limit_mb=2048 -print_final_stats=1 "$work/corpus" "$seeds" \
  >"$log" 2>&1
rc=$?
if [ "$rc" -eq 0 ]; then
  tail -n 25 "$log"
  echo "PASS: $(basename "$fuzzer"): no failure in ${seconds} s"
  exit 0
fi
# The report begins at the first sanitizer or libFuzzer error line (an
# uncaught exception or a failed assertion prints its line just before);
# print from 10 lines before it to the end, or the whole log when it is
# short or has no such line.
lines=$(wc -l <"$log")
first=$(grep -n -m1 -E '==[0-9]+== ?ERROR|^ERROR:|runtime error:|SUMMARY: |terminate called|terminating due to|Assertion .* failed' "$log" | cut -d: -f1)
if [ -z "$first" ] || [ "$lines" -le 200 ]; then
  cat "$log"
else
  from=$((first > 10 ? first - 10 : 1))
  echo "... ($((from - 1)) lines of progress before the report left out)"
  tail -n +"$from" "$log"
fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "FAIL: $(basename "$fuzzer") did not stop within $((seconds + 60)) s"
else
  echo "FAIL: $(basename "$fuzzer") exited with status $rc (report above)"
fi
exit "$rc"
