# Starting and stopping `actorflow node` processes for the multi-process
# tests (multihost_test.sh, tls_test.sh, netns_test.sh,
# resilience_test.sh), and their shared assertions and topology templates.
# The sourcing script sets `bin` (the actorflow binary), `tmp` (a fresh
# directory) and `data` (the templates' folder), and installs an EXIT trap
# that calls stop_nodes. Every node
# runs under timeout(1) as a watchdog (NODE_WATCHDOG_S, default 170 s);
# stop_nodes stops exactly the nodes started here: SIGTERM, then SIGKILL
# after a grace period, then wait.

# Every process these tests start (nodes and `actorflow run`) reports
# leaks except those inside CAF's libraries: CAF 0.17.6's BASP broker can
# stay behind in a reference cycle at exit after a connection was lost
# (lsan_caf_broker.supp says why and what that hides).
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lsan_caf_broker.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

declare -A node_pid   # name -> the node's own pid
declare -A watcher    # name -> its timeout(1) wrapper (a child of this shell)
declare -A port       # name -> the port it listens on
nodes=()              # names, in start order

# Alive and not yet a zombie (a zombie still answers kill -0).
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "${state#Z}" = "$state" ]
}

# stop_nodes [GRACE_S]: SIGTERM to every node still running, SIGKILL to
# those still there after GRACE_S seconds, then reap the watchers. Sets
# node_rc[name] to each watcher's exit status (the node's, or 137 when it
# was killed).
declare -A node_rc
stop_nodes() {
  local grace=${1:-10} n i any
  for n in "${nodes[@]}"; do
    alive "${watcher[$n]}" && kill -TERM "${node_pid[$n]}" 2>/dev/null
  done
  for ((i = 0; i < grace * 10; ++i)); do
    any=0
    for n in "${nodes[@]}"; do alive "${watcher[$n]}" && any=1; done
    [ $any -eq 0 ] && break
    sleep 0.1
  done
  for n in "${nodes[@]}"; do
    if alive "${watcher[$n]}"; then
      echo "node $n did not stop within ${grace} s of SIGTERM: killing it"
      kill -KILL "${node_pid[$n]}" 2>/dev/null
      kill -KILL "${watcher[$n]}" 2>/dev/null
    fi
  done
  for n in "${nodes[@]}"; do
    wait "${watcher[$n]}" 2>/dev/null
    node_rc[$n]=$?
  done
  nodes=()
}
touch "$tmp/out" "$tmp/err"
fail() {
  local n
  echo "FAIL: $*"
  echo "--- stdout"; cat "$tmp/out"
  echo "--- stderr"; tail -n 60 "$tmp/err"
  for n in $(ls "$tmp" | sed -n 's/^node-\(.*\)\.err$/\1/p'); do
    echo "--- node $n stderr"; tail -n 40 "$tmp/node-$n.err"
  done
  exit 1
}
expect_rc() { [ "$rc" -eq "$1" ] || fail "expected exit code $1, got $rc"; }
expect_out() { grep -q -- "$1" "$tmp/out" || fail "stdout lacks '$1'"; }
expect_err() { grep -q -- "$1" "$tmp/err" || fail "stderr lacks '$1'"; }
node_has() { grep -q -- "$2" "$tmp/node-$1.err" || fail "node $1's log lacks '$2'"; }
node_lacks() { ! grep -q -- "$2" "$tmp/node-$1.err" || fail "node $1's log has '$2'"; }

# wait_log NAME PATTERN SECONDS: until node NAME's log has PATTERN.
wait_log() {
  local i
  for ((i = 0; i < $3 * 10; ++i)); do
    grep -q -- "$2" "$tmp/node-$1.err" && return 0
    sleep 0.1
  done
  fail "node $1 did not log '$2' within $3 s"
}

# read_auc: the test split's AUC and the planted model's from the run's
# summary, into auc and ref.
read_auc() {
  expect_out "^  test (step [0-9]\+): loss [0-9.]\+, AUC [0-9.]\+ (planted model's AUC [0-9.]\+)$"
  read -r auc ref <<<"$(sed -n "s/^  test (step [0-9]*): loss [0-9.]*, AUC \([0-9.]*\) (planted model's AUC \([0-9.]*\))$/\1 \2/p" "$tmp/out")"
}
# The model's AUC at most 0.03 below the planted model's.
expect_auc_near_planted() {
  awk -v a="$auc" -v r="$ref" 'BEGIN { exit !(r > 0.8 && r - a <= 0.03) }' \
    || fail "AUC $auc is more than 0.03 below the planted model's $ref"
}

# Seconds since the `date +%s.%N` time $1, to 0.1 s.
since() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }

# start_job LIMIT FILE PATTERN: runs "$topo" in the background (job: its
# pid) under a time limit of LIMIT s, with the arguments in the array
# job_args if set, and waits (30 s at most) until FILE has a line with
# PATTERN that it did not have before. The job must still be running then.
job_args=()
start_job() {
  local limit=$1 file=$2 pattern=$3 lines i
  lines=$(wc -l <"$file")
  timeout -k 5 "$limit" "$bin" run "$topo" --no-progress "${job_args[@]}" \
    >"$tmp/out" 2>"$tmp/err" </dev/null &
  job=$!
  for ((i = 0; i < 300; ++i)); do
    tail -n +$((lines + 1)) "$file" | grep -q -- "$pattern" && break
    alive $job || break
    sleep 0.1
  done
  alive $job || { wait $job; rc=$?; fail "the job ended (exit $rc) before the fault"; }
  tail -n +$((lines + 1)) "$file" | grep -q -- "$pattern" \
    || fail "$(basename "$file") has no '$pattern' within 30 s of the start"
}

# fault_free_run [LIMIT [ARG...]]: runs "$topo" (the multi-killed job,
# data/multi_killed.pbtxt.in) without a fault, within LIMIT seconds
# (default 60), with the ARGs added to `actorflow run`: it finishes, loses
# no replica, and its AUC, clean_auc, is near the planted model's; then
# every node ended the job.
fault_free_run() {
  local n limit=${1:-60} t0
  shift || true
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$bin" run "$topo" --no-progress "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
  echo "the fault-free run took $(since "$t0") s"
  expect_rc 0
  expect_out "job 'multi-killed' finished"
  ! grep -q 'replica lost' "$tmp/out" || fail "a replica was lost without a fault"
  read_auc; expect_auc_near_planted
  clean_auc=$auc
  for n in "${nodes[@]}"; do wait_log "$n" "node: job ended" 15; done
}

# expect_trainer_lost FAULT T0: after FAULT (words for the messages) at
# time T0 (date +%s.%N), the background multi-killed job ($job) logs within
# 10 s that train[1] was lost (remote_link_unreachable; noticed: after how
# many seconds), finishes with train[0], reports exactly that lost replica,
# and its AUC is within 0.01 of the fault-free run's. respawn_note, if set,
# is the pattern that ends the summary's line of the loss; by default
# train[1] was respawned on w2.
expect_trainer_lost() {
  local fault=$1 t0=$2 i
  local lost='train\[1\] failed (exit_reason(remote_link_unreachable)); the job goes on without it'
  noticed=
  for ((i = 0; i < 300; ++i)); do
    grep -q -- "$lost" "$tmp/err" && { noticed=$(since "$t0"); break; }
    alive "$job" || break
    sleep 0.1
  done
  wait "$job"; rc=$?
  echo "the job ended (exit $rc) $(since "$t0") s after $fault"
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] \
    || fail "the job hung after $fault (no end within 60 s; a fault-free run takes a few)"
  expect_rc 0
  [ -n "$noticed" ] || fail "stderr lacks '$lost'"
  echo "the loss of train[1] was logged $noticed s after $fault"
  awk -v t="$noticed" 'BEGIN { exit !(t < 10) }' \
    || fail "train[1] was noticed lost $noticed s after $fault (limit 10 s)"
  expect_out "job 'multi-killed' finished"
  expect_out "^  replica lost, job went on: train\[1\]: exit_reason(remote_link_unreachable); [0-9]\+ items it had not finished went to the other replicas${respawn_note:-; respawned on host 'w2' [0-9.]\+ s after it was lost}$"
  [ "$(grep -c 'replica lost' "$tmp/out")" -eq 1 ] || fail "expected one lost replica"
  grep 'replica lost\|(lost)\|training:' "$tmp/out"
  read_auc; expect_auc_near_planted
  awk -v a="$auc" -v b="$clean_auc" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' \
    || fail "AUC $auc after $fault, $clean_auc without a fault: more than 0.01 apart"
  echo "AUC without a fault $clean_auc, after $fault $auc, planted $ref"
}

# start_node NAME [LISTEN [ARGS...]]: starts a node (on 127.0.0.1:0 unless
# told otherwise) and waits (30 s at most) for the line with its port. The
# array node_exec, if set, prefixes the node's command (e.g. `ip netns
# exec NS`).
node_exec=()
start_node() {
  local name=$1 listen=${2:-127.0.0.1:0} i line host
  shift; shift || true
  host=127.0.0.1 # a bare port binds the loopback address
  [[ $listen == *:* ]] && host=${listen%:*}
  timeout -k 5 "${NODE_WATCHDOG_S:-170}" "${node_exec[@]}" \
    bash -c 'echo $$ >"$0"; exec "$@"' \
    "$tmp/node-$name.pid" "$bin" node --listen "$listen" "$@" \
    >"$tmp/node-$name.out" 2>"$tmp/node-$name.err" </dev/null &
  watcher[$name]=$!
  nodes+=("$name")
  for ((i = 0; i < 300; ++i)); do
    line=$(grep -m1 '^actorflow node listening on ' "$tmp/node-$name.out" 2>/dev/null)
    [ -n "$line" ] && break
    alive "${watcher[$name]}" || fail "node $name exited before listening"
    sleep 0.1
  done
  [ -n "$line" ] || fail "node $name printed no 'listening on' line in 30 s"
  [[ $line =~ ^actorflow\ node\ listening\ on\ ([0-9.]+):([0-9]+)$ ]] \
    && [ "${BASH_REMATCH[1]}" = "$host" ] \
    || fail "node $name: unexpected line '$line'"
  port[$name]=${BASH_REMATCH[2]}
  [ "${port[$name]}" -gt 0 ] || fail "node $name listens on port 0"
  node_pid[$name]=$(cat "$tmp/node-$name.pid")
}

# topology TEMPLATE PORT...: data/TEMPLATE.pbtxt.in with @P1@, @P2@, ...
# replaced; sets topo to the path of the result.
topology() {
  local template=$1 i=1 p args=()
  shift
  for p in "$@"; do args+=(-e "s/@P$i@/$p/g"); i=$((i + 1)); done
  sed "${args[@]}" "$data/$template.pbtxt.in" >"$tmp/$template.pbtxt"
  grep -q '@P[0-9]@' "$tmp/$template.pbtxt" && fail "$template: a port is not filled in"
  topo=$tmp/$template.pbtxt
}

# expect_coordinator_share REPORT: the --report-json REPORT of a job over
# nodes says that more than 1 MB crossed between nodes and that the
# coordinator's connections carried some of it, at most 1%
# (docs/multi-host.md, "Bytes through the coordinator").
expect_coordinator_share() {
  python3 - "$1" <<'PY' || fail "more than 1% of the data between nodes went through the coordinator"
import json, sys
r = json.load(open(sys.argv[1]))
data, coord = r["network_bytes"], r["coordinator_bytes"]
print(f"data between nodes {data} B, through the coordinator {coord} B ({100 * coord / data:.3f}%)")
sys.exit(0 if data > 1e6 and 0 < coord <= 0.01 * data else 1)
PY
}

# expect_clean_end [NAME...]: no sanitizer report so far, then every node
# started here stops cleanly on SIGTERM (exit 0, "node: stopping" in its
# log, no sanitizer report at exit), except the NAMEs (nodes a test killed
# or froze on purpose).
expect_clean_end() {
  local n
  no_sanitizer_reports
  local started=("${nodes[@]}")
  stop_nodes 10
  for n in "${started[@]}"; do
    [[ " $* " == *" $n "* ]] && continue
    [ "${node_rc[$n]}" -eq 0 ] || fail "node $n exited with ${node_rc[$n]} on SIGTERM"
    node_has "$n" "node: stopping"
    ! grep -q 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:' "$tmp/node-$n.err" \
      || fail "sanitizer report from node $n at exit"
  done
}

# No sanitizer report in the run's or any node's stderr.
no_sanitizer_reports() {
  local f
  for f in "$tmp"/err "$tmp"/node-*.err; do
    [ -e "$f" ] || continue
    ! grep -q 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:' "$f" \
      || fail "sanitizer report in $(basename "$f")"
  done
}
