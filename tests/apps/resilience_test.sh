#!/usr/bin/env bash
# Every `actorflow run` and `actorflow node` exits once its work is done,
# and jobs start on nodes that just had garbage on their ports:
#   trainer_node_killed_loop  a trainer's node killed at chosen moments,
#                             twenty times and more
#   stall                     the shutdown bound (--shutdown-timeout) with a
#                             shutdown that cannot finish (failpoint
#                             shutdown.stall), and a signal during it
#   garbage_then_jobs         garbage on a node's port, then a job at once,
#                             twenty times
#   handshake_retry           a first connection that never gets CAF's
#                             handshake: the job tries again and runs
# Usage: resilience_test.sh ACTORFLOW CASE
#
# Nodes run on 127.0.0.1:0 under timeout(1) (tests/apps/nodes.sh); the EXIT
# trap stops exactly the nodes and the job started here.
set -u
bin=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
data=$here/data
tmp=$(mktemp -d)

# shellcheck source=nodes.sh
source "$here/nodes.sh"
job= # the job in the background (its timeout(1) wrapper), if any
cleanup() {
  [ -n "$job" ] && alive "$job" && kill -KILL "$job"
  stop_nodes 5 >/dev/null
  [ -n "$job" ] && wait "$job" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

now() { date +%s.%N; }
# elapsed T0 [T1]: seconds from T0 to T1 (default now), to 0.01 s.
elapsed() { awk -v s="$1" -v e="${2:-$(now)}" 'BEGIN { printf "%.2f", e - s }'; }
# le A B: A <= B (numbers).
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# Seconds the shutdown may take (--shutdown-timeout) in these tests.
bound=10

# run_job ARGS...: `actorflow run ARGS` in the background; job is its pid
# (timeout(1) as a last resort: 120 s), t_start when it started.
run_job() {
  : >"$tmp/out"; : >"$tmp/err"
  t_start=$(now)
  timeout -k 5 120 "$bin" run "$@" --no-progress --shutdown-timeout "$bound" \
    >"$tmp/out" 2>"$tmp/err" </dev/null &
  job=$!
}

# wait_for FILE PATTERN SECONDS: until FILE has PATTERN (returns 1 if not,
# or if the job ended first and the file still lacks it).
wait_for() {
  local i
  for ((i = 0; i < $3 * 20; ++i)); do
    grep -q -- "$2" "$1" && return 0
    alive "$job" || { grep -q -- "$2" "$1"; return; }
    sleep 0.05
  done
  return 1
}

# finish_job SUMMARY_PATTERN: waits for the job's summary line, then for
# its exit; sets rc, t_summary (when the summary was seen) and
# t_exit. Fails when the summary does not come within 60 s, or when the
# process outlives the summary by more than the bound (+1 s for this
# script's polling).
finish_job() {
  local pattern=$1 i
  wait_for "$tmp/out" "$pattern" 90 || fail "no '$pattern' within 90 s"
  t_summary=$(now)
  for ((i = 0; i < (bound + 5) * 20; ++i)); do
    alive "$job" || break
    sleep 0.05
  done
  if alive "$job"; then
    kill -KILL "$job"
    wait "$job"; job=
    fail "the process was still there $(elapsed "$t_summary") s after its summary (bound $bound s)"
  fi
  t_exit=$(now)
  wait "$job"; rc=$?; job=
  le "$(elapsed "$t_summary" "$t_exit")" "$((bound + 1))" \
    || fail "the process exited $(elapsed "$t_summary" "$t_exit") s after its summary (bound $bound s)"
}

# restart_w2 [ENV...]: (re)starts node w2, with the environment ENV
# (AF_FAILPOINT=...) if given; the dead one's log is kept as
# node-w2.err.<run>.
restart_w2() {
  local n
  if [ -n "${watcher[w2]:-}" ]; then
    alive "${watcher[w2]}" && kill -KILL "${node_pid[w2]}"
    wait "${watcher[w2]}" 2>/dev/null
    mv "$tmp/node-w2.err" "$tmp/node-w2.err.$run"
    # (start_node reads the port and pid from these: not the old node's)
    rm -f "$tmp/node-w2.out" "$tmp/node-w2.pid"
    local keep=()
    for n in "${nodes[@]}"; do [ "$n" = w2 ] || keep+=("$n"); done
    nodes=("${keep[@]}")
  fi
  if [ $# -gt 0 ]; then
    env "$@" bash -c 'true' # (checks the words)
    export "$@"
    start_node w2
    local v
    for v in "$@"; do unset "${v%%=*}"; done
  else
    start_node w2
  fi
}

case "$case_name" in
  trainer_node_killed_loop)
    # The CTR job (data/shutdown_killed.pbtxt.in): train[0] on w1,
    # train[1] on w2, the shards and the evaluator in the coordinator.
    # w2 dies at one of these moments, in turn:
    #   started     as soon as w2 has made train[1] and the job is wired
    #               (train[0] on w1 logged its first step). Not earlier:
    #               a node lost after making a replica and before its
    #               answer reached the coordinator holds job::start for the
    #               spawn request's 60 s (CAF 0.17 gives a pending request
    #               no error for a lost node), then fails the job; the
    #               ASan clean-clone run of 2026-12-01 hit that window once.
    #   before      about to send its first push (failpoint ps.push.before)
    #   during      first push sent, not yet acknowledged (ps.push.sent)
    #   after       first push acknowledged (ps.push.acked)
    #   mid         once train[1] is in its second epoch
    #   final_eval  train[1] has finished its stream (its summary line):
    #               the evaluator's final evaluation is then under way
    # Every run must end with exit code 0, the summary, at most the one
    # lost replica, and the process gone within the bound after its
    # summary, without the bound's help (no "shutdown did not finish").
    runs=${SHUTDOWN_RUNS:-24}
    # (SHUTDOWN_MOMENTS="final_eval ..." picks some, to chase one.)
    read -r -a moments <<<"${SHUTDOWN_MOMENTS:-started before during after mid final_eval}"
    start_node w1
    run=0
    restart_w2
    topology shutdown_killed "${port[w1]}" "${port[w2]}"
    for ((run = 1; run <= runs; ++run)); do
      moment=${moments[$(((run - 1) % ${#moments[@]}))]}
      case $moment in
        before) restart_w2 AF_FAILPOINT=ps.push.before:1 ;;
        during) restart_w2 AF_FAILPOINT=ps.push.sent:1 ;;
        after) restart_w2 AF_FAILPOINT=ps.push.acked:1 ;;
        *) restart_w2 ;;
      esac
      topology shutdown_killed "${port[w1]}" "${port[w2]}"
      lines=$(wc -l <"$tmp/node-w1.err")
      run_job "$topo"
      case $moment in
        started | mid | final_eval)
          pattern='node: started train\[1\]'
          [ "$moment" = mid ] && pattern='train\[1\]: epoch 1 step'
          [ "$moment" = final_eval ] && pattern='train\[1\]: [0-9]\+ steps, [0-9]\+ samples'
          wait_for "$tmp/node-w2.err" "$pattern" 60 \
            || fail "run $run ($moment): node w2 never logged '$pattern'"
          if [ "$moment" = started ]; then
            for ((i = 0; i < 1200; ++i)); do
              tail -n +$((lines + 1)) "$tmp/node-w1.err" | grep -q 'train\[0\]: epoch [0-9]\+ step' && break
              alive "$job" || break
              sleep 0.05
            done
          fi
          kill -KILL "${node_pid[w2]}"
          ;;
        *)
          wait_for "$tmp/node-w2.err" "failpoint .*: killing this process" 60 \
            || fail "run $run ($moment): the failpoint was not reached"
          ;;
      esac
      t_kill=$(now)
      finish_job "job 'shutdown-killed' finished"
      [ "$rc" -eq 0 ] || fail "run $run ($moment): exit code $rc"
      ! grep -q 'shutdown did not finish\|still there:' "$tmp/err" \
        || fail "run $run ($moment): the shutdown needed the bound"
      lost=$(grep -c 'replica lost' "$tmp/out")
      [ "$lost" -le 1 ] || fail "run $run ($moment): $lost replicas lost"
      if [ "$moment" != final_eval ]; then
        grep -q '^  replica lost, job went on: train\[1\]: ' "$tmp/out" \
          || fail "run $run ($moment): train[1]'s loss is not in the summary"
      fi
      grep -q "^  test (step [0-9]\+): loss [0-9.]\+, AUC 0\.[0-9]\+" "$tmp/out" \
        || fail "run $run ($moment): no test AUC in the summary"
      echo "run $run ($moment): exit 0, $(elapsed "$t_kill" "$t_summary") s from the kill to the summary, $(elapsed "$t_summary" "$t_exit") s from the summary to the exit, $lost replica lost"
      no_sanitizer_reports
      # w1 ends the job's actors before the next run.
      for ((i = 0; i < 150; ++i)); do
        [ "$(tail -n +$((lines + 1)) "$tmp/node-w1.err" | grep -c 'node: job ended')" -ge 1 ] && break
        sleep 0.1
      done
    done
    alive "${watcher[w1]}" || fail "node w1 is gone"
    echo "$runs runs: every process exited within $bound s of its summary"
    ;;
  stall)
    # A shutdown that cannot finish (failpoint shutdown.stall: a detached
    # actor whose last reference is never released, as in the hang this
    # bound is for): the process exits when the bound is up, with the
    # job's exit code, and names the actor still there.
    bound=3
    export AF_FAILPOINT=shutdown.stall
    run_job "$data/small.pbtxt"
    finish_job "job '.*' finished"
    [ "$rc" -eq 0 ] || fail "exit code $rc after a successful job (expected 0)"
    spent=$(elapsed "$t_summary" "$t_exit")
    le 2.5 "$spent" || fail "exited $spent s after the summary: before the bound ($bound s)?"
    grep -q "actorflow: shutdown did not finish within 3 s (--shutdown-timeout); exiting with 0" "$tmp/err" \
      || fail "stderr does not say that the bound ended the shutdown"
    grep -q "still there: failpoint shutdown.stall (actor [0-9]\+): exited (.*), still referenced" "$tmp/err" \
      || fail "stderr does not name the actor that was still there"
    echo "stalled shutdown: exit 0 after $spent s (bound $bound s)"
    # A failed job keeps its exit code (1).
    run_job "$data/failing.pbtxt"
    finish_job "job '.*' failed"
    [ "$rc" -eq 1 ] || fail "exit code $rc after a failed job (expected 1)"
    grep -q "exiting with 1" "$tmp/err" || fail "the bound did not keep exit code 1"
    # A signal during the stalled shutdown ends it at once.
    bound=60
    run_job "$data/small.pbtxt"
    wait_for "$tmp/out" "job '.*' finished" 60 || fail "no summary"
    wait_for "$tmp/err" "failpoint shutdown.stall" 10 || fail "no stall"
    t_sig=$(now)
    kill -TERM "$job"
    for ((i = 0; i < 100; ++i)); do alive "$job" || break; sleep 0.05; done
    alive "$job" && fail "SIGTERM during the shutdown did not end it within 5 s"
    wait "$job"; rc=$?; job=
    [ "$rc" -eq 0 ] || fail "exit code $rc after SIGTERM during the shutdown of a successful job"
    grep -q "interrupted while shutting down; exiting with 0" "$tmp/err" \
      || fail "stderr does not say the signal ended the shutdown"
    echo "SIGTERM during the stalled shutdown: exit 0 after $(elapsed "$t_sig") s"
    # A node told to stop (SIGTERM) whose shutdown stalls: gone within
    # its bound.
    unset AF_FAILPOINT
    AF_FAILPOINT=shutdown.stall start_node w1 127.0.0.1:0 --shutdown-timeout 2
    t_sig=$(now)
    kill -TERM "${node_pid[w1]}"
    for ((i = 0; i < 100; ++i)); do alive "${watcher[w1]}" || break; sleep 0.05; done
    alive "${watcher[w1]}" && fail "the node outlived its 2 s bound by 3 s"
    wait "${watcher[w1]}"; node_rc=$?
    nodes=()
    [ "$node_rc" -eq 0 ] || fail "the node exited with $node_rc (expected 0)"
    grep -q "still there: failpoint shutdown.stall" "$tmp/node-w1.err" \
      || fail "the node did not name the actor still there"
    echo "node with a stalled shutdown: exit 0 after $(elapsed "$t_sig") s (bound 2 s)"
    no_sanitizer_reports
    ;;
  garbage_then_jobs)
    # As in issue 15: 3 x 64 KiB of random bytes, each on its own
    # connection, 0.5 s of quiet, then a job on the node at once; 20
    # rounds, each with its own seed (printed). Garbage whose first 32
    # bytes pass for a BASP header makes CAF 0.17 zero-fill a receive
    # buffer of the size that header claims (up to 4 GiB) on the node's
    # only I/O thread; the job's connect must get through all the same
    # (it tries a timed-out handshake again within its connect timeout).
    # Round 0 sends, before its random bytes, 32 bytes that pass for a
    # BASP header claiming a 1 GiB payload, so that every run of this test
    # meets the stall. The jobs get a connect timeout of 60 s: the stall
    # lasts about a second per GiB claimed, longer on a loaded machine.
    start_node w1
    topology one_node "${port[w1]}"
    rounds=${GARBAGE_ROUNDS:-20}
    base=${AF_GARBAGE_SEED:-$RANDOM}
    echo "garbage seeds: $base..$((base + rounds - 1)) (AF_GARBAGE_SEED)"
    for ((r = 0; r < rounds; ++r)); do
      python3 - "${port[w1]}" "$((base + r))" "$r" <<'PY' || fail "round $r: could not send the garbage"
import random, socket, struct, sys, time
port, seed, r = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
def send(data):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(data)
    except OSError:
        pass  # the node may close on us: that is its right
    s.close()
if r == 0:
    # operation 0 (server_handshake), payload_len 1 GiB, operation_data,
    # source and destination actor: CAF 0.17's check passes it.
    send(struct.pack(">BBBBIQQQ", 0, 0, 0, 0, 1 << 30, 7, 1, 2))
for _ in range(3):
    send(rng.randbytes(64 * 1024))
time.sleep(0.5)
PY
      alive "${watcher[w1]}" || fail "round $r: node w1 died of the garbage (seed $((base + r)))"
      run_job "$topo" --connect-timeout 60
      finish_job "job 'one-node' \(finished\|failed\)"
      [ "$rc" -eq 0 ] || fail "round $r (seed $((base + r))): the job failed (exit $rc)"
      grep -q "delivered: 20000 records" "$tmp/out" \
        || fail "round $r: not all 20000 records delivered"
      retries=$(grep -c "no CAF handshake on attempt" "$tmp/err")
      echo "round $r (seed $((base + r))): job ok in $(elapsed "$t_start" "$t_exit") s, $retries handshake retries"
    done
    no_sanitizer_reports
    ;;
  handshake_retry)
    # A first connection that is accepted and never answered (a relay in
    # front of node w1 holds it silent), the next ones relayed to w1: the
    # job gives up on the first handshake after CAF's 3 s
    # (middleman.connection-timeout), tries again and runs.
    start_node w1
    python3 - "${port[w1]}" "$tmp/relay.port" <<'PY' &
import os, socket, sys, threading
node_port, port_file = int(sys.argv[1]), sys.argv[2]
srv = socket.socket()
srv.bind(("127.0.0.1", 0)); srv.listen(8); srv.settimeout(60)
open(port_file + ".tmp", "w").write(str(srv.getsockname()[1]))
os.rename(port_file + ".tmp", port_file)
def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
held = []
try:
    first = True
    while True:
        c, _ = srv.accept()
        if first:
            held.append(c)  # accepted, never answered
            first = False
            continue
        n = socket.create_connection(("127.0.0.1", node_port))
        threading.Thread(target=pump, args=(c, n), daemon=True).start()
        threading.Thread(target=pump, args=(n, c), daemon=True).start()
except OSError:
    pass
PY
    relay=$!
    for ((i = 0; i < 100; ++i)); do [ -s "$tmp/relay.port" ] && break; sleep 0.1; done
    [ -s "$tmp/relay.port" ] || { kill $relay; fail "the relay did not start"; }
    topology one_node "$(cat "$tmp/relay.port")"
    run_job "$topo"
    finish_job "job 'one-node' \(finished\|failed\)"
    kill $relay 2>/dev/null; wait $relay 2>/dev/null
    [ "$rc" -eq 0 ] || fail "the job failed (exit $rc) although the second connection was answered"
    grep -q "host 'w1' (127.0.0.1:[0-9]*): no CAF handshake on attempt 1 (.*connection_timeout.*); trying again" "$tmp/err" \
      || fail "stderr does not show the retried handshake"
    grep -q "delivered: 20000 records" "$tmp/out" || fail "not all 20000 records delivered"
    grep "no CAF handshake" "$tmp/err"
    echo "first handshake never answered: retried, job ok in $(elapsed "$t_start" "$t_exit") s"
    no_sanitizer_reports
    ;;
  *)
    echo "unknown case '$case_name'"
    exit 2
    ;;
esac
echo PASS
