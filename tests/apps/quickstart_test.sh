#!/usr/bin/env bash
# docs/multi-host-quickstart.md's rehearsal, exactly as written: the shell
# block between its "rehearsal" markers runs in a network namespace of its
# own (so that its fixed ports 4242/4243 and 4252/4253 are private), in a
# directory laid out like the repository root (build/release/bin is the
# tested build's bin/, apps/ the source tree's, build/data/ its own).
# Checks the job's accuracy and the nodes' logs; every process the block
# starts lives in the namespace, which ends with the test.
#   quickstart_test.sh ACTORFLOW SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=../support/skip.sh
source "$(dirname "$0")/../support/skip.sh"
fail() { echo "FAIL: $*"; for f in "$work"/root/*.log "$work"/run.out; do [ -f "$f" ] && { echo "--- $f"; tail -30 "$f"; }; done; exit 1; }

dpkg -L dataset-fashion-mnist > /dev/null 2>&1 || skip_missing "dataset-fashion-mnist is not installed"
unshare -n true 2> /dev/null || skip_missing "unshare -n (a network namespace) is not permitted here"

doc=$src/docs/multi-host-quickstart.md
awk '/<!-- rehearsal/ { on = 1; next } /<!-- \/rehearsal -->/ { on = 0 } on' "$doc" \
  | sed '/^```/d' > "$work/block.sh"
[ -s "$work/block.sh" ] || fail "no rehearsal block in $doc"

root=$work/root
mkdir -p "$root/build/release"
ln -s "$(dirname "$bin")" "$root/build/release/bin"
ln -s "$src/apps" "$root/apps"
# The block runs in this shell (sourced), so that the EXIT trap stops the
# nodes it started in the background even when a command of it fails
# (a network namespace does not end its processes).
(cd "$root" && timeout 600 unshare -n bash -c \
  'ip link set lo up && set -euo pipefail && trap "kill \$(jobs -p) 2>/dev/null || true; wait || true" EXIT && . "$1"' \
  rehearsal "$work/block.sh") > "$work/run.out" 2>&1 || fail "the rehearsal exited with $?"
cat "$work/run.out" | tail -5

acc=$(sed -n 's/^  test (step [0-9]*): loss [0-9.]*, accuracy \([0-9.]*\)$/\1/p' "$work/run.out")
[ -n "$acc" ] || fail "no test accuracy in the summary"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.88) }' || fail "test accuracy $acc < 0.88 (the doc says 0.89 or close)"
grep -q "^  through the coordinator: " "$work/run.out" || fail "the summary does not count the coordinator's traffic"
for n in 1 2; do
  log=$root/w$n.log
  port=$((4241 + n)) data=$((4251 + n)) k=$((n - 1))
  grep -q "node: listening on 127.0.0.1:$port" "$log" || fail "w$n does not listen on $port"
  grep -q "node: data port 127.0.0.1:$data" "$log" || fail "w$n has no data port $data"
  grep -q "node: started ps\[$k\]" "$log" || fail "w$n did not run ps[$k]"
  grep -q "node: started train\[$k\]" "$log" || fail "w$n did not run train[$k]"
  grep -q "data plane: .* over TCP" "$log" || fail "w$n's data plane did not connect over TCP"
  grep -q "node: job ended (normally)" "$log" || fail "w$n did not see the job end normally"
done
echo "ok: the rehearsal trained to $acc with a trainer and a shard on each node"
