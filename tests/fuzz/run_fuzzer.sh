#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time on its seed corpus.
# Usage: run_fuzzer.sh FUZZER SEED_CORPUS_DIR SECONDS
# New inputs go to a temporary directory (the seed corpus stays as it is);
# a crash leaves its input in the current directory and fails the test.
set -u
fuzzer=$1 seeds=$2 seconds=$3
if [ ! -x "$fuzzer" ]; then
  echo "FAIL: $fuzzer was not built (scripts/setup configures build/fuzz)"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 "$work" "$seeds" 2>&1 | tail -25
exit "${PIPESTATUS[0]}"
