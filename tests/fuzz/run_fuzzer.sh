#!/usr/bin/env bash
# Runs one libFuzzer target on its seed corpus: first it replays every
# seed once (each file by name, so that a failing seed is named), then it
# fuzzes for a bounded time from that corpus.
# Usage: run_fuzzer.sh FUZZER SEED_CORPUS_DIR SECONDS [NEW_INPUTS_DIR]
# SECONDS 0 replays the seeds only. New inputs go to NEW_INPUTS_DIR when
# given (scripts/fuzz keeps them there), else to a temporary directory;
# the seed corpus stays as it is.
# The whole log is kept: when the fuzzer fails (a crash, a sanitizer
# report, a leak, a timeout or running out of memory) the report is printed
# in full, from its first line on, and the failing input is left in the
# current directory (crash-*, leak-*, timeout-*, oom-*); when it passes,
# only the final lines (the stats) are printed.
set -u
fuzzer=$1 seeds=$2 seconds=$3 keep=${4:-}
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
corpus=${keep:-$work/corpus}
mkdir -p "$corpus"
limits=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048)
# 1. Every seed once, by name: libFuzzer runs the files it is given and
# stops at the first that fails. A bound on the whole run as well: one
# input may hang (-timeout then reports it); this catches the rest.
seed_files=()
while IFS= read -r -d '' f; do seed_files+=("$f"); done \
  < <(find "$seeds" -type f -print0 | sort -z)
timeout -k 10 120 "$fuzzer" "${limits[@]}" "${seed_files[@]}" >"$log" 2>&1
rc=$?
ran=$(grep -c '^Executed ' "$log")
if [ "$rc" -eq 0 ] && [ "$ran" -ne "${#seed_files[@]}" ]; then
  cat "$log"
  echo "FAIL: $(basename "$fuzzer") replayed $ran of the ${#seed_files[@]} seeds"
  exit 1
fi
phase="replaying the seeds"
if [ "$rc" -eq 0 ]; then
  echo "replayed all ${#seed_files[@]} seeds of $seeds: no failure"
  if [ "$seconds" -eq 0 ]; then
    echo "PASS: $(basename "$fuzzer"): ${#seed_files[@]} seeds, no fuzzing asked for"
    exit 0
  fi
  # 2. Fuzzing from the seeds for SECONDS. max_total_time is checked
  # between inputs; the outer bound catches an input that hangs.
  phase="fuzzing"
  timeout -k 10 $((seconds + 60)) \
    "$fuzzer" -max_total_time="$seconds" "${limits[@]}" -print_final_stats=1 \
    "$corpus" "$seeds" >"$log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    tail -n 25 "$log"
    echo "PASS: $(basename "$fuzzer"): ${#seed_files[@]} seeds replayed, no failure in ${seconds} s of fuzzing"
    exit 0
  fi
fi
echo "while $phase:"
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
  echo "FAIL: $(basename "$fuzzer") did not stop in time ($phase)"
else
  echo "FAIL: $(basename "$fuzzer") exited with status $rc (report above)"
fi
exit "$rc"
