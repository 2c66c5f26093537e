#!/usr/bin/env bash
# bench/copy_count.sh: copies and allocations per pushed byte on the
# parameter-server path between two processes, counted, not assumed.
# Runs `ps_throughput --ps-only` (push + pull of a 16 MiB variable in 4 MiB
# parts, nothing else) twice per plane, ROUNDS and 2 x ROUNDS rounds, (caf: CAF's middleman, data-tcp: the
# data plane over loopback TCP, data-unix: the data plane over a Unix
# socket, data: the same with the tensors in shared memory)
# (both processes: perf follows the child it spawns) under `perf record`
# with these events, and prints, per byte of PS payload that the extra
# ROUNDS rounds moved (pushed + pulled; the start-up is the same in both
# runs and drops out):
#   - user-space copies: bytes passed to glibc's memmove/memcpy (uprobes on
#     its AVX, AVX-512 and EVEX variants, one of which this CPU uses) in
#     calls of 4 KiB or more;
#   - kernel copies: bytes the socket system calls moved (sendmsg, sendto,
#     write, recvmsg, recvfrom, read: each copies its bytes once between
#     user and kernel space; calls of 4 KiB or more);
#   - page faults per MiB: fresh memory the kernel zeroed and mapped (new
#     buffers, where a pool would reuse old ones).
# Small calls are left out: they are framing, not payload, and counting
# every one would slow the run down more than it measures. Not counted:
# memset (a uprobe on glibc's memset variants crashes the process here)
# and malloc calls (one on malloc crashes perf 6.1 at exit).
#   bench/copy_count.sh [BUILD_DIR] [ROUNDS]   (build/release, 16 rounds)
# Needs root (uprobes and tracepoints) and libc6-dbg (the memmove
# variants are local symbols of libc). Removes the probes it added on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
rounds=${2:-16}
bin=$build/bin/ps_throughput
[ -x "$bin" ] || { echo "no $bin: build the ps_throughput target first" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "copy_count.sh: needs root (perf probes)" >&2; exit 2; }
command -v perf >/dev/null || { echo "copy_count.sh: needs perf (linux-perf)" >&2; exit 2; }
libc=$(ldd "$bin" | sed -n 's/.*libc\.so\.6 => \([^ ]*\).*/\1/p')
work=$(mktemp -d)
added=()
cleanup() {
  local e
  for e in "${added[@]}"; do perf probe -q -d "$e" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# probe NAME SPEC: a uprobe on libc, when the symbol exists (the memmove
# variants glibc picks from by CPU); adds it to `events`.
events=()
filters=()
probe() {
  if perf probe -q -x "$libc" -a "$1=$2" 2>/dev/null; then
    added+=("probe_libc:$1")
    events+=("probe_libc:$1")
    filters+=("len >= 4096")
  fi
}
for v in avx_unaligned_erms avx512_unaligned_erms evex_unaligned_erms; do
  probe "copy_$v" "__memmove_$v len=%dx:u64"
done
[ ${#events[@]} -ge 1 ] || { echo "copy_count.sh: cannot probe glibc's memmove (is libc6-dbg installed?)" >&2; exit 2; }
for s in sendmsg sendto write recvmsg recvfrom read; do
  events+=("syscalls:sys_exit_$s"); filters+=("ret >= 4096")
done
args=()
for i in "${!events[@]}"; do args+=(-e "${events[$i]}" --filter "${filters[$i]}"); done
# Every page fault: fresh memory the kernel had to zero and map (new
# buffers, where a pool would reuse old ones).
args+=(-e page-faults -c 1)

# measure PLANE ROUNDS: "PAYLOAD COPY KERNEL FAULTS" of one run.
measure() {
  timeout -k 5 600 perf record -q -o "$work/perf.data" "${args[@]}" -- \
    "$bin" --ps-only --plane "$1" --rounds "$2" --warmup 2 --reps 1 \
    >"$work/out" 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
  local payload
  payload=$(sed -n 's/^ps_payload_bytes \([0-9]*\)$/\1/p' "$work/out")
  [ -n "$payload" ] || { cat "$work/out" "$work/err" >&2; exit 1; }
  perf script -i "$work/perf.data" -F comm,event,trace 2>/dev/null \
    | python3 -c '
import re, sys
copy = kern = faults = 0
for line in sys.stdin:
    if "page-faults" in line:
        faults += 1
        continue
    m = re.search(r"probe_libc:copy_\w+:.*?len=(0x[0-9a-f]+|\d+)", line)
    if m:
        copy += int(m.group(1), 0)
        continue
    m = re.search(r"syscalls:sys_exit_\w+:\s+(0x[0-9a-f]+|\d+)", line)
    if m:
        kern += int(m.group(1), 0)
print(sys.argv[1], copy, kern, faults)
' "$payload"
}

# Each plane twice, ROUNDS and 2 x ROUNDS rounds: the differences are what
# the extra rounds cost, without the start (the model's initial values,
# the connections, the warm-up), which is the same in both.
echo "| plane | PS payload (the extra rounds) | user-space copies (memmove, calls >= 4 KiB) | kernel copies (socket calls >= 4 KiB) | page faults |"
echo "|---|---|---|---|---|"
for plane in caf data-tcp data-unix data; do
  one=$(measure "$plane" "$rounds")
  two=$(measure "$plane" $((2 * rounds)))
  python3 - "$plane" $one $two <<'PY'
import sys
plane = sys.argv[1]
a = list(map(int, sys.argv[2:6])); b = list(map(int, sys.argv[6:10]))
payload, copy, kern, faults = (y - x for x, y in zip(a, b))
mib = payload / (1 << 20)
print(f"| {plane} | {mib:,.0f} MiB | {copy / payload:.2f} B per byte | {kern / payload:.2f} B per byte | {faults / mib:.1f} per MiB |")
PY
done
