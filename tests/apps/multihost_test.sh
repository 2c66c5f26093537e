#!/usr/bin/env bash
# Jobs spread over `actorflow node` processes on this machine: placement,
# node reuse, unreachable and faulty peers, a node killed or frozen
# (SIGSTOP) mid-job.
# Usage: multihost_test.sh ACTORFLOW CASE
#
# Every node is started here on 127.0.0.1:0 (any free port) and its port is
# read from its stdout; the topologies are templates (data/multi_*.pbtxt.in)
# whose @P1@, @P2@, @P3@ are filled in with those ports. Each node runs
# under timeout(1) as a watchdog, and the EXIT trap stops exactly the nodes
# started here: SIGTERM, then SIGKILL after a grace period, then wait. A
# node a case froze with SIGSTOP (its pid in `frozen`) gets SIGCONT first,
# and a job still running in the background SIGTERM (timeout(1) passes it
# on, and SIGKILL 5 s later).
set -u
bin=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
data=$here/data
tmp=$(mktemp -d)

# shellcheck source=nodes.sh
source "$here/nodes.sh"
# shellcheck source=../support/skip.sh
source "$here/../support/skip.sh"
frozen=
job=  # a job run in the background (its timeout(1) wrapper), if any
cleanup() {
  [ -n "$frozen" ] && kill -CONT "$frozen" 2>/dev/null
  [ -n "$job" ] && alive "$job" && kill -TERM "$job"
  stop_nodes 5 >/dev/null
  [ -n "$job" ] && wait "$job" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# run_limited SECONDS ARGS...: the CLI with a time limit (a hang shows as
# exit code 124 or 137).
run_limited() { local limit=$1; shift
  timeout -k 5 "$limit" "$bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?; }

# freeze NAME: SIGSTOP to node NAME; t_stop is when, ended_before how many
# jobs it had ended by then.
freeze() {
  alive "${watcher[$1]}" || fail "node $1 is gone before it could be frozen"
  t_stop=$(date +%s.%N)
  ended_before=$(grep -c 'node: job ended' "$tmp/node-$1.err")
  kill -STOP "${node_pid[$1]}"
  frozen=${node_pid[$1]}
  echo "froze node $1 (pid ${node_pid[$1]})"
}

# thaw NAME: SIGCONT to the frozen node NAME, which notices that its
# coordinator dropped it and stops the job's actors it held.
thaw() {
  local i
  kill -CONT "${node_pid[$1]}"
  frozen=
  for ((i = 0; i < 150; ++i)); do
    [ "$(grep -c 'node: job ended' "$tmp/node-$1.err")" -gt "$ended_before" ] && return 0
    sleep 0.1
  done
  fail "node $1 did not end the job within 15 s of SIGCONT"
}

# shard_frozen TRAINERS: the CTR job of data/multi_shard.pbtxt.in, where
# w3 holds parameter-server shard ps[1] and nothing else; w3 is frozen
# once training is under way and the job must fail within 30 s, naming
# the shard. TRAINERS: "node" (both replicas on w2, as in the template)
# or "local" (in the `actorflow run` process: the template's one
# `hosts: ["w2"]` line removed).
shard_frozen() {
  local progress elapsed
  # Without leak checks where the trainers and the evaluator run (w2 and
  # the coordinator, below): when a shard is lost their blocking
  # ps_clients fail, and CAF 0.17 leaves each one's caf::scoped_actor in a
  # reference cycle with the request timeouts still due (LeakSanitizer:
  # indirect leaks only, all allocated inside CAF). A run without a lost
  # shard has no such leak (every other multihost case checks).
  start_node w1
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" start_node w2
  start_node w3
  topology multi_shard "${port[w1]}" "${port[w2]}" "${port[w3]}"
  progress=$tmp/node-w2.err
  if [ "$1" = local ]; then
    sed -i '/^  hosts: \["w2"\]$/d' "$topo"
    ! grep -q 'hosts: \["w2"\]' "$topo" || fail "the trainers are still placed on w2"
    progress=$tmp/err
  fi
  # A hang shows as exit code 124 or 137 (no end within 40 s).
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
    start_job 40 "$progress" 'train\[[01]\]: epoch [0-9]\+ step'
  node_has w3 "node: started ps\[1\]"
  node_lacks w3 "node: started \(clicks\|batch\|train\)\["
  freeze w3
  wait $job; rc=$?
  elapsed=$(since "$t_stop")
  echo "the job ended (exit $rc) $elapsed s after w3 was frozen"
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] \
    || fail "the job hung after w3 (shard ps[1]) was frozen: still running $elapsed s after the SIGSTOP, when timeout(1) ended it (exit $rc)"
  expect_rc 1
  expect_out "job 'multi-shard' failed after"
  # "actorflow: ps[1] went down: exit_reason(remote_link_unreachable)", or
  # a trainer's "stage train[0] failed: parameter server ps[1] went down"
  # when that reaches the coordinator first.
  expect_err "^actorflow: .*ps\[1\] went down"
  grep '^actorflow: ' "$tmp/err"
  awk -v t="$elapsed" 'BEGIN { exit !(t < 30) }' \
    || fail "the job took $elapsed s after the SIGSTOP to fail (limit 30 s)"
  thaw w3
  wait_log w1 "node: job ended" 15
  [ "$1" = local ] || wait_log w2 "node: job ended" 15
  expect_clean_end w3
  echo "node w3, thawed, exited with ${node_rc[w3]} on SIGTERM"
}

# list_trained_ids: the trainers of "$topo" (a CTR template's `trainer {
# log_every_steps: 50 }`) list the records they train in
# $tmp/ids-REPLICA.txt (TrainerConfig.record_ids; the nodes run on this
# machine, so the files are here).
list_trained_ids() {
  sed -i "s|trainer { log_every_steps: 50 }|trainer { log_every_steps: 50 record_ids: \"$tmp/ids-{replica}.txt\" }|" "$topo"
  grep -q 'record_ids: ' "$topo" || fail "the template's trainer block changed"
}

# trained_ids_fault_free: after fault_free_run with list_trained_ids, each
# of the 40000 records exactly once in each of the 10 epochs.
trained_ids_fault_free() {
  python3 "$here/record_ids.py" exactly-once --by-epoch --epochs 10 --records 40000 \
    "$tmp"/ids-0.txt "$tmp"/ids-1.txt \
    || fail "without a fault, the trainers' record ids are not every record once per epoch"
}

# trained_ids_after_loss: the trainers' record ids once train[1] was lost
# (docs/training.md, "Losing a trainer": the batcher keeps every batch it
# sent to a trainer until the trainer's push of it was acknowledged, and
# sends those train[1] had not finished to train[0]): every record at
# least once per epoch, and those that came twice are at most three
# batches of 128: those train[1] had trained whose credit had not reached
# the batcher (docs/training.md, "Losing a trainer"). The coordinator tells the
# batcher on w1 (CAF 0.17 does not tell w1 of w3's loss): it logs what it
# sends again.
trained_ids_after_loss() {
  node_has w1 "batch\[0\]: consumer 'train\[1\]' went down (.*); the [0-9]\+ items it had not finished go to the other replicas"
  # Respawned on w2 (w3 is gone), it joined the batcher and the shards and
  # trained.
  node_has w1 "batch\[0\]: consumer 'train\[1\]' joins (started while the job runs)"
  node_has w1 "ps\[[01]\]: worker 1 joins again at clock [0-9]\+ (it had left at clock [0-9]\+)"
  node_has w2 "train\[1\]: [0-9]\+ steps, [1-9][0-9]* samples, "
  grep "train\[1\]: [0-9]* steps, " "$tmp/node-w2.err"
  python3 "$here/record_ids.py" at-least-once --epochs 10 --records 40000 \
    --max-dups 384 "$tmp"/ids-0.txt "$tmp"/ids-1.txt \
    || fail "the trainers' record ids after train[1] was lost are not what the docs say"
}

# as_torchscript: for a case named *_torchscript, the model of "$topo"
# (data/multi_killed.pbtxt.in's: embedding, flatten, dense, sigmoid loss)
# becomes the same model as a TorchScript module, tests/torchscript's
# "clicks", over the engine's table; else nothing. Its file is scripted
# into $tmp/coord.
as_torchscript() {
  [[ $case_name == *_torchscript ]] || return 0
  mkdir -p "$tmp/coord"
  /usr/bin/python3 "$here/../torchscript/make_modules.py" "$tmp/coord" >/dev/null \
    || fail "could not script the test modules"
  python3 - "$topo" "$tmp/coord/clicks.pt" <<'PY' || fail "the template's model changed"
import re, sys
path, module = sys.argv[1:]
s = open(path).read()
model = ('model {\n'
         f'    torchscript {{ file: "{module}" }}\n'
         '    table { name: "ids" rows: 200 }\n'
         '    embedding_dim: 4\n'
         '    inputs { field: "ids" table: "ids" }\n'
         '    inputs { field: "label" }\n'
         '  }')
s, n = re.subn(r'model \{\n    input: "ids"\n.*?\n  \}', lambda _: model, s, flags=re.S)
if n != 1:
    sys.exit(f"{path}: {n} model sections like data/multi_killed.pbtxt.in's")
open(path, "w").write(s)
PY
  grep -q 'torchscript { file: ' "$topo" || fail "no torchscript model in $topo"
}

# trainer_lost_setup: the trainer_node_* cases up to the fault: nodes w1-w3
# with train[1] on w3, a fault-free run whose record ids are checked, then
# the job again in the background until train[1] has trained.
trainer_lost_setup() {
  start_node w1; start_node w2; start_node w3
  topology multi_killed "${port[w1]}" "${port[w2]}" "${port[w3]}"
  as_torchscript
  list_trained_ids
  fault_free_run
  trained_ids_fault_free
  start_job 60 "$tmp/node-w3.err" 'train\[1\]: epoch [0-9]\+ step'
}

# log_time LINE: the time stamp at the start of an spdlog line, as seconds
# since the epoch.
log_time() { date -d "${1:0:23}" +%s.%N; }

# shard_killed WHERE: the CTR job of data/multi_restore.pbtxt.in (with
# checkpoints), where w3 holds parameter-server shard ps[1]; w3 is killed
# (SIGKILL) after the first checkpoint. The job must restore the shard
# from that checkpoint and finish: all 400000 samples trained (by the
# trainers' record ids: each of the 40000 records exactly once in each of
# the 10 epochs; the pushes lost with the old shard are counted apart), the
# AUC near the planted model's, the steps lost in the log and in the report.
# WHERE: "other" (the template: ps on w1 and w3, so ps[1] moves to w1),
# "frozen" (the same, but w3 gets SIGSTOP instead: the heartbeat finds it
# out; thawed at the end, it drops its part of the job), or "restarted"
# (both shards on w3, and w3 is started again at its address as node w3b:
# both shards come back there).
shard_killed() {
  local where=$1 took shards=(1) k host
  start_node w1; start_node w2; start_node w3
  topology multi_restore "${port[w1]}" "${port[w2]}" "${port[w3]}"
  sed -i "s|@D@|$tmp/ckpt|" "$topo"
  list_trained_ids
  host=w1
  if [ "$where" = restarted ]; then
    sed -i 's/hosts: \["w1", "w3"\]/hosts: ["w3"]/' "$topo"
    grep -q 'ps { shards: 2 staleness: 2 hosts: \["w3"\] }' "$topo" \
      || fail "the shards are not both placed on w3"
    shards=(0 1); host=w3
  fi
  start_job 90 "$tmp/err" 'checkpoint at step [0-9]\+ written'
  t_kill=$(date +%s.%N)
  if [ "$where" = frozen ]; then
    freeze w3
  else
    kill -KILL "${node_pid[w3]}"
    echo "killed node w3 (pid ${node_pid[w3]})"
  fi
  [ "$where" = restarted ] && start_node w3b "127.0.0.1:${port[w3]}"
  wait $job; rc=$?
  took=$(since "$t_kill")
  echo "the job ended (exit $rc) $took s after w3 was stopped"
  expect_rc 0
  expect_out "job 'multi-restore' finished"
  expect_out "^  training: [0-9]\+ steps, 400000 samples, "
  python3 "$here/record_ids.py" exactly-once --by-epoch --epochs 10 --records 40000 \
    "$tmp"/ids-0.txt "$tmp"/ids-1.txt \
    || fail "the trainers' record ids: not every record exactly once per epoch"
  for k in "${shards[@]}"; do
    expect_err "ps\[$k\] went down (.*); restoring it from the last checkpoint"
    expect_out "^  restored: ps\[$k\] on host '$host' from the checkpoint at step [0-9]\+: [0-9]\+ steps lost$"
    expect_err "ps\[$k\]: [0-9]\+ steps of worker [01] lost with the old one"
  done
  grep '^  restored: ' "$tmp/out"
  ! grep -q 'replica lost' "$tmp/out" || fail "a trainer was lost with the shard"
  # The trainers (on w2) move to the restored shard as soon as the
  # coordinator has it: it tells them the shard is gone (ps_gone_atom)
  # rather than letting their requests time out (2 s), or their requests
  # come back at once because their data connection to the killed node
  # broke, and they ask the coordinator. When the node was killed, each
  # says which. (Frozen or restarted, a trainer may reach the coordinator
  # first through its own stats probe: seen in Release runs of
  # shard_node_frozen_restored.)
  local t_gone t_join moved w
  if [ "$where" = other ]; then
    for w in 0 1; do
      node_has w2 "worker $w: \(the coordinator says ps\[1\] is lost; waiting for its replacement\|ps\[1\] did not take a request (its connection is down); asking the coordinator where it is\)"
    done
  fi
  t_gone=$(log_time "$(grep -m1 'ps\[1\] went down' "$tmp/err")")
  t_join=$(log_time "$(grep 'joined the restored ps\[1\]' "$tmp/node-w2.err" | tail -n 1)")
  moved=$(awk -v a="$t_gone" -v b="$t_join" 'BEGIN { printf "%.2f", b - a }')
  echo "both trainers joined the restored ps[1] $moved s after the coordinator noticed its loss"
  # A bound for a slow path only: the log lines above show the mechanism.
  # Measured 0.20 s (killed, 3 runs) and 0.64 s (frozen) in Release; 2.6 s
  # once under ASan on a loaded machine, which failed the old 1.5 s bound. (restarted: that also includes
  # waiting for the new node to listen)
  [ "$where" = restarted ] || awk -v t="$moved" 'BEGIN { exit !(t < 5) }' \
    || fail "the trainers took $moved s to move to the restored shard (limit 5 s)"
  read_auc; expect_auc_near_planted
  wait_log w1 "node: job ended" 15
  wait_log w2 "node: job ended" 15
  if [ "$where" = frozen ]; then
    thaw w3
    expect_clean_end
  else
    expect_clean_end w3
  fi
}

# input_node_killed TEMPLATE STAGE: Fashion-MNIST's test split in 8
# TFRecord shards (3 epochs: 30000 records) through the job of
# data/TEMPLATE.pbtxt.in, fault-free first (the sink's list of record ids,
# $ids, must hold every record exactly once per epoch), then with w3
# (replica 1 of STAGE) killed mid-job; checks that the job finishes and
# says so, and sets n to the records delivered (which the sink's list
# must match line for line; the caller checks the ids).
input_node_killed() {
  local template=$1 stage=$2 fm labels
  fm=$(dpkg -L dataset-fashion-mnist 2>/dev/null | grep 't10k-images') \
    || skip_missing "dataset-fashion-mnist is not installed"
  labels=${fm/images-idx3/labels-idx1}
  mkdir -p "$tmp/shards"
  "$bin" convert idx --images "$fm" --labels "$labels" --out "$tmp/shards/t10k" \
    --shards 8 >/dev/null 2>&1 || fail "convert failed"
  start_node w1; start_node w2; start_node w3
  topology "$template" "${port[w1]}" "${port[w2]}" "${port[w3]}"
  sed -i "s|@D@|$tmp/shards|" "$topo"
  run_limited 90 run "$topo" --no-progress
  expect_rc 0
  expect_out "^  delivered: 30000 records"
  ids=$tmp/shards/ids.txt
  check_ids exactly-once || fail "without a fault, the sink's record ids are not every record once per epoch"
  for n in w1 w2 w3; do wait_log "$n" "node: job ended" 15; done
  start_job 90 "$tmp/node-w3.err" "node: started $stage\\[1\\]"
  sleep 1.5
  alive "$job" || fail "the job ended before w3 was killed"
  t_kill=$(date +%s.%N)
  kill -KILL "${node_pid[w3]}"
  echo "killed node w3 (pid ${node_pid[w3]})"
  wait $job; rc=$?
  echo "the job ended (exit $rc) $(since "$t_kill") s after w3 was killed"
  expect_rc 0
  local handled
  handled=$(grep -m1 "$stage\[1\] went down" "$tmp/err") \
    && echo "the coordinator handled the loss $(awk -v a="$t_kill" -v b="$(log_time "$handled")" \
      'BEGIN { printf "%.2f", b - a }') s after the kill"
  n=$(sed -n 's/^  delivered: \([0-9]\+\) records.*/\1/p' "$tmp/out")
  echo "delivered $n records (30000 without the fault)"
  [ -n "$n" ] && [ "$(wc -l <"$ids")" -eq "$n" ] \
    || fail "the summary says ${n:-no} records delivered, the sink listed $(wc -l <"$ids")"
}

# check_ids MODE [ARGS...]: tests/apps/record_ids.py MODE on the sink's
# list $ids against every record of the shards, 3 epochs.
check_ids() {
  python3 "$here/record_ids.py" "$@" --epochs 3 --tfrecords "$tmp/shards/t10k-*.tfrecord" "$ids"
}

# reader_killed: data/multi_reader.pbtxt.in, two readers on w1 and w3.
# reader[0] must take over reader[1]'s files from the epoch it was in, so
# that no file is left out (docs/multi-host.md: at-least-once): by the
# sink's record ids, every record arrives at least once per epoch; the
# ones that came twice are listed, and must be what reader[1] had sent of
# the epoch it was lost in: the first D records of its files 1, 3, 5, 7 in
# the order it reads them, D at most its share of an epoch (5000).
reader_killed() {
  input_node_killed multi_reader reader
  expect_err "reader\[1\] went down (.*); reader\[0\] takes over its input from epoch [0-2]"
  expect_out "^  replica lost, job went on: reader\[1\]: .*; its input went to reader\[0\] from epoch [0-2]$"
  node_has w1 "reader\[0\]: takes over the 4 files of replica 1 from epoch [0-2]"
  node_has w2 "batch\[0\]: input 'reader\[1\]' was lost"
  check_ids at-least-once --dups-prefix-of 1,3,5,7 --max-dups 5000 \
    || fail "the sink's record ids are not what the docs promise for a lost reader"
  echo "(why: reader[0] read reader[1]'s files again from the start of epoch" \
    "$(sed -n 's/.*reader\[0\] takes over its input from epoch \([0-9]*\).*/\1/p' "$tmp/err" | head -1)," \
    "the one reader[1] was lost in; what reader[1] had sent of it came twice)"
  wait_log w1 "node: job ended" 15
  wait_log w2 "node: job ended" 15
  expect_clean_end w3
}

# decoder_killed: data/multi_decode.pbtxt.in, one reader on w1, two
# decoders on w2 and w3. The reader must send what decode[1] had not
# finished to decode[0] (docs/multi-host.md: no record lost,
# at-least-once): by the sink's record ids, every record arrives at least
# once per epoch; the ones that came twice are listed, and must be whole
# items (50 records) among those the reader sent again: items whose
# outputs had reached the batcher before decode[1]'s acknowledgement
# reached the reader. (It once lost an item: decode[1] credited the
# reader for an item whose output was still on its way to the
# coordinator's node when w3 died. Items are now acknowledged only once
# the batcher credited their outputs: runtime/stage/credit.hpp, pending_ack.)
decoder_killed() {
  input_node_killed multi_decode decode
  expect_err "decode\[1\] went down (.*); its unfinished items go to the other replicas of decode"
  expect_out "^  replica lost, job went on: decode\[1\]: .*; [0-9]\+ items it had not finished went to the other replicas$"
  # The reader hears of it by the coordinator's word, or first by its data
  # connection to w3 breaking (its stand-in for decode[1] goes down).
  node_has w1 "reader\[0\]: consumer 'decode\[1\]' went down (\(its node is lost, the coordinator says\|exit_reason(remote_link_unreachable)\)); the [0-9]\+ items it had not finished go to the other replicas"
  grep 'consumer .decode\[1\]' "$tmp/node-w1.err"
  local again
  again=$(sed -n "s/.*consumer 'decode\[1\]' went down .*; the \([0-9]\+\) items it had not finished.*/\1/p" "$tmp/node-w1.err" | head -1)
  check_ids at-least-once --dups-whole-items 50 --max-dups $((again * 50)) \
    || fail "the sink's record ids are not what the docs promise for a lost decoder ($again items sent again)"
  echo "(why: the reader sent decode[1]'s $again unfinished items to decode[0]; any that" \
    "came twice had reached the batcher before decode[1]'s acknowledgement reached the reader)"
  wait_log w1 "node: job ended" 15
  wait_log w2 "node: job ended" 15
  expect_clean_end w3
}

# chain_killed: data/multi_chain.pbtxt.in, the reader on w1, then parse
# and decode (one_to_one, a replica of each on w2 and w3). parse[1] sends
# to decode[1] on its own node: the reader may forget an item only once
# decode[1]'s outputs reached the batcher, so w3's loss loses no record
# (docs/multi-host.md: at-least-once). Duplicates are whole items.
chain_killed() {
  input_node_killed multi_chain decode
  expect_out "^  replica lost, job went on: decode\[1\]: "
  expect_out "^  replica lost, job went on: parse\[1\]: "
  # What each producer sent again.
  grep -h "items it had not finished go to" "$tmp"/node-w*.err "$tmp/err"
  check_ids at-least-once --dups-whole-items 50 \
    || fail "the sink's record ids are not what the docs promise for a lost node in a chain of one-to-one stages"
  wait_log w1 "node: job ended" 15
  wait_log w2 "node: job ended" 15
  expect_clean_end w3
}

# restart_training WHAT: the CTR job with checkpoints
# (data/multi_restore.pbtxt.in, shards on w1 and w3) loses a node after
# its first checkpoint, and `actorflow run` starts it again from the
# checkpoint (docs/multi-host.md, "Restarting after a lost node").
# WHAT "input": its only source and batcher are placed on w1 then w2, the
# trainers on w2; w1 is killed, and the source, the batcher and ps[0] move
# (to w2, w2, w3). WHAT "trainer": the trainers are placed on w2 and w1;
# w2 is killed, and train[0] moves to w1 (without checkpoints the job
# would go on without it, its unfinished batches sent to train[1]:
# trainer_node_killed).
# Every sample is trained: by the trainers' record ids, each record exactly
# once per epoch (the steps after the checkpoint are cut from the lists
# and trained again), and the AUC is near the planted model's. The steps
# the summary says are trained again are those the trainers cut from
# their lists; a trainer lost with its node counts by its last report (up
# to 0.5 s old), so there they may be fewer.
restart_training() {
  local what=$1 victim took again cut ids_node
  start_node w1; start_node w2; start_node w3
  topology multi_restore "${port[w1]}" "${port[w2]}" "${port[w3]}"
  sed -i "s|@D@|$tmp/ckpt|" "$topo"
  if [ "$what" = input ]; then
    sed -i 's/^  hosts: \["w1"\]$/  hosts: ["w1", "w2"]/' "$topo"
    [ "$(grep -c '^  hosts: \["w1", "w2"\]$' "$topo")" -eq 2 ] \
      || fail "the template's source and batcher placements changed"
    victim=w1 ids_node=w2
  else
    sed -i 's/^  hosts: \["w2"\]$/  hosts: ["w2", "w1"]/' "$topo"
    [ "$(grep -c '^  hosts: \["w2", "w1"\]$' "$topo")" -eq 1 ] \
      || fail "the template's trainer placement changed"
    victim=w2 ids_node=w1
  fi
  list_trained_ids
  start_job 90 "$tmp/err" 'checkpoint at step [0-9]\+ written'
  t_kill=$(date +%s.%N)
  kill -KILL "${node_pid[$victim]}"
  echo "killed node $victim (pid ${node_pid[$victim]})"
  wait $job; rc=$?
  echo "the job ended (exit $rc) $(since "$t_kill") s after the kill"
  expect_err "resuming from $tmp/ckpt/ckpt-"
  took=$(awk -v a="$t_kill" -v b="$(log_time "$(grep -m1 'resuming from' "$tmp/err")")" \
    'BEGIN { printf "%.2f", b - a }')
  echo "started again from the checkpoint $took s after the kill"
  awk -v t="$took" 'BEGIN { exit !(t < 10) }' || fail "the restart took $took s (limit 10 s)"
  expect_rc 0
  expect_out "job 'multi-restore' finished"
  expect_out "^  training: [0-9]\+ steps, [0-9]\+ samples, "
  grep '^  restarted: \|^  started \|^  training: \|^  resumed \|replica lost' "$tmp/out"
  ! grep -q 'replica lost' "$tmp/out" || fail "a replica was lost for good: the job should have started again"
  local restarted="^  restarted: after losing .*: from $tmp/ckpt/ckpt-[0-9]\+ (step [1-9][0-9]*); the trainers had reached step [0-9]\+ by their last counts: at least [0-9]\+ steps are trained again; "
  if [ "$what" = input ]; then
    expect_out "$restarted.*batch\[0\] from host 'w1' to 'w2'"
    expect_out "$restarted.*clicks\[0\] from host 'w1' to 'w2'"
    expect_out "$restarted.*ps\[0\] from host 'w1' to 'w3'"
  else
    expect_out "$restarted.*train\[0\] from host 'w2' to 'w1'"
    ! grep -q "ps\[[01]\] from host" "$tmp/out" || fail "a shard moved: none was on w2"
  fi
  again=$(sed -n 's/^  restarted: .*: at least \([0-9]*\) steps are trained again; .*/\1/p' "$tmp/out")
  cut=$(sed -n 's/.*train\[[01]\]: record ids: .*; cut [0-9]* records of steps \([0-9]*\) to \([0-9]*\), .*/\1 \2/p' \
    "$tmp/node-$ids_node.err" | awk '{ n += $2 - $1 + 1 } END { print n + 0 }')
  echo "steps trained again: $again in the summary, $cut cut from the trainers' record id lists"
  if [ "$what" = input ]; then
    [ "$again" = "$cut" ] || fail "the summary's steps trained again ($again) are not those the trainers cut ($cut)"
  else
    [ "$again" -le "$cut" ] || fail "the summary's steps trained again ($again) exceed those the trainers cut ($cut)"
  fi
  expect_out "^  started 2 times; "
  python3 "$here/record_ids.py" exactly-once --by-epoch --epochs 10 --records 40000 \
    "$tmp"/ids-0.txt "$tmp"/ids-1.txt \
    || fail "the trainers' record ids: not every record exactly once per epoch"
  read_auc
  expect_auc_near_planted
  for n in w1 w2 w3; do
    [ "$n" = "$victim" ] || wait_log "$n" "node: job ended" 15
  done
  expect_clean_end "$victim"
}

# start_multi_restart: nodes w1, w2 and w3, and data/multi_restart.pbtxt.in
# filled in (Fashion-MNIST's test split, the sink's ids in $tmp/ids.txt,
# checkpoints in $tmp/ckpt).
start_multi_restart() {
  local images
  images=$(dpkg -L dataset-fashion-mnist 2>/dev/null | grep 't10k-images-idx3' | head -1)
  [ -n "$images" ] || skip_missing "needs Debian's dataset-fashion-mnist"
  start_node w1; start_node w2; start_node w3
  topology multi_restart "${port[w1]}" "${port[w2]}" "${port[w3]}"
  sed -i -e "s|@IMAGES@|$images|" -e "s|@LABELS@|${images/images-idx3/labels-idx1}|" \
    -e "s|@IDS@|$tmp/ids.txt|" -e "s|@D@|$tmp/ckpt|" "$topo"
}

# The CTR job of data/multi_placement.pbtxt.in on nodes w1 and w2.
run_placement() {
  topology multi_placement "${port[w1]}" "${port[w2]}"
  run_limited 90 run "$topo" --no-progress --report-json "$tmp/report.json"
  expect_rc 0
  expect_out "job 'multi-placement' finished"
  expect_out "^  training: [0-9]\+ steps, 80000 samples, "
  # Batches go from w1 to the trainers on w2: the 80000 records' ids alone
  # are 2.56 MB (then labels, and the parameters of ps[0] on w1).
  expect_out "^  network: .* between nodes"
  local net
  # The top-level key: the report's "metrics" also hold replicas' own
  # network_bytes metrics.
  net=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["network_bytes"])' "$tmp/report.json")
  [ "${net:-0}" -gt 2560000 ] || fail "network_bytes '$net' in the report: below the ids' 2.56 MB"
  read_auc
  expect_auc_near_planted
}

case $case_name in
  placement)
    start_node w1; start_node w2
    run_placement
    # Each replica and shard on the node the topology names, and only there.
    node_has w1 "node: started clicks\[0\]"
    node_has w1 "node: started batch\[0\]"
    node_has w1 "node: started ps\[0\]"
    node_has w2 "node: started ps\[1\]"
    node_has w2 "node: started train\[0\]"
    node_has w2 "node: started train\[1\]"
    node_lacks w1 "node: started train\["
    node_lacks w1 "node: started ps\[1\]"
    node_lacks w2 "node: started clicks\["
    node_lacks w2 "node: started batch\["
    node_lacks w2 "node: started ps\[0\]"
    # The coordinator's own stages stay in its process.
    node_lacks w1 "node: started \(test_clicks\|test_batch\|evaluate\)\["
    node_lacks w2 "node: started \(test_clicks\|test_batch\|evaluate\)\["
    # The trainers' final lines come from w2, where they ran.
    node_has w2 "train\[0\]: [0-9]\+ steps"
    node_has w2 "train\[1\]: [0-9]\+ steps"
    wait_log w1 "node: job ended" 15
    wait_log w2 "node: job ended" 15
    expect_clean_end
    ;;
  torchscript)
    # The nodes run where the module's file is not: only the coordinator,
    # in $tmp/coord, reads it.
    [ ! -e clicks.pt ] || fail "the nodes' working directory $PWD has a clicks.pt"
    start_node w1; start_node w2
    mkdir -p "$tmp/coord"
    /usr/bin/python3 "$here/../torchscript/make_modules.py" "$tmp/coord" >/dev/null \
      || fail "could not script the test modules"
    topology multi_torchscript "${port[w1]}" "${port[w2]}"
    cd "$tmp/coord" || fail "no $tmp/coord"
    run_limited 120 run "$topo" --no-progress
    cd - >/dev/null || fail "cannot go back"
    expect_rc 0
    expect_out "job 'multi-torchscript' finished"
    node_has w2 "node: started train\[0\]"
    node_has w2 "node: started train\[1\]"
    node_has w2 "train\[0\]: [0-9]\+ steps"
    read_auc
    awk -v a="$auc" -v r="$ref" 'BEGIN { exit !(r - a <= 0.02) }' \
      || fail "AUC $auc is more than 0.02 below the planted model's $ref"
    wait_log w1 "node: job ended" 15
    wait_log w2 "node: job ended" 15
    expect_clean_end
    ;;
  next_job)
    start_node w1; start_node w2
    run_placement
    wait_log w1 "node: job ended" 15
    wait_log w2 "node: job ended" 15
    # The same nodes take another job, and then the first one again.
    topology multi_pipeline "${port[w1]}" "${port[w2]}"
    run_limited 60 run "$topo" --no-progress
    expect_rc 0
    expect_out "job 'multi-pipeline' finished"
    expect_out "delivered: 20000 records"
    run_placement
    for n in w1 w2; do
      wait_log $n "node: job ended" 15
      for ((i = 0; i < 150; ++i)); do
        [ "$(grep -c 'node: job ended' "$tmp/node-$n.err")" -ge 3 ] && break
        sleep 0.1
      done
      [ "$(grep -c 'node: job ended' "$tmp/node-$n.err")" -eq 3 ] \
        || fail "node $n did not end 3 jobs"
    done
    node_has w1 "node: started reader\[0\]"
    node_has w2 "node: started decode\[1\]"
    [ "$(grep -c 'node: started train\[0\]' "$tmp/node-w2.err")" -eq 2 ] \
      || fail "node w2 did not start train[0] for both CTR jobs"
    expect_clean_end
    ;;
  unreachable)
    free=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
    start=$(date +%s.%N)
    topology multi_unreachable "$free"
    run_limited 30 run "$topo" --no-progress
    elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    expect_rc 1
    expect_err "host 'ghost' (127\.0\.0\.1:$free) is unreachable"
    awk -v t="$elapsed" 'BEGIN { exit !(t <= 10) }' \
      || fail "took $elapsed s to give up on an unreachable host"
    expect_clean_end
    ;;
  garbage)
    start_node w1; start_node w2
    seed=${AF_GARBAGE_SEED:-$RANDOM}
    echo "garbage seed: $seed (node w1 on port ${port[w1]})"
    python3 - "${port[w1]}" "$seed" <<'EOF' || fail "could not send the garbage"
import random, socket, sys, time
port, seed = int(sys.argv[1]), int(sys.argv[2])
def connect():
    return socket.create_connection(("127.0.0.1", port), timeout=5)
def send(data):
    s = connect()
    try:
        s.sendall(data)
        time.sleep(0.3)
    except OSError:
        pass  # the node may close on us: that is its right
    s.close()
# 4 KiB of random bytes.
send(random.Random(seed).randbytes(4096))
# A message cut short after 4 bytes (a header needs more).
send(b"\x00\x00\x00\x7f")
# A port scan: connect and go.
connect().close()
EOF
    sleep 0.5
    alive "${watcher[w1]}" || fail "node w1 died of the garbage"
    topology multi_pipeline "${port[w1]}" "${port[w2]}"
    run_limited 60 run "$topo" --no-progress
    expect_rc 0
    expect_out "job 'multi-pipeline' finished"
    expect_out "delivered: 20000 records"
    node_has w1 "node: started reader\[0\]"
    node_has w1 "node: started decode\[0\]"
    alive "${watcher[w1]}" && alive "${node_pid[w1]}" || fail "node w1 is gone after the job"
    wait_log w1 "node: job ended" 15
    expect_clean_end
    ;;
  trainer_node_killed|trainer_node_killed_torchscript)
    # (_torchscript: the model is a TorchScript module, as_torchscript.)
    trainer_lost_setup
    # w3 (trainer replica 1) is killed once it has trained.
    t_kill=$(date +%s.%N)
    alive "${watcher[w3]}" && kill -KILL "${node_pid[w3]}"
    echo "killed node w3 (pid ${node_pid[w3]})"
    expect_trainer_lost "w3 was killed" "$t_kill"
    trained_ids_after_loss
    alive "${watcher[w1]}" && alive "${watcher[w2]}" || fail "a surviving node is gone"
    wait_log w1 "node: job ended" 15
    wait_log w2 "node: job ended" 15
    expect_clean_end w3
    ;;
  trainer_joins|trainer_joins_resume|trainer_joins_resume_torchscript)
    # A node started after the job began joins it: train has one replica
    # (on w2) and max_replicas 2 with hosts w2 and w3, and w3's node starts
    # once train[0] has trained (its port chosen before). The coordinator
    # asks w3 every second, starts train[1] there, the batcher takes it and
    # the shards count it from the slowest live clock. No fault: by the
    # trainers' record ids every record exactly once per epoch.
    # trainer_joins_resume: with checkpoints; the coordinator is killed
    # after a checkpoint that holds train[1], and --resume starts train[0]
    # alone (train[1]'s part is dropped, the shards drop its worker), and
    # w3 joins again. Still every record exactly once per epoch.
    # trainer_joins_resume_torchscript: the same with the model as a
    # TorchScript module (as_torchscript).
    start_node w1; start_node w2
    p3=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    topology multi_killed "${port[w1]}" "${port[w2]}" "$p3"
    as_torchscript
    sed -i -e 's/^  replicas: 2$/  replicas: 1\n  max_replicas: 2/' -e 's/^    epochs: 10$/    epochs: 30/' "$topo"
    grep -q '^  max_replicas: 2$' "$topo" && grep -q '^    epochs: 30$' "$topo" \
      || fail "the template's trainer or source changed"
    [[ $case_name == trainer_joins_resume* ]] \
      && echo "checkpoint { dir: \"$tmp/ckpt\" every_steps: 300 }" >>"$topo"
    list_trained_ids
    start_job 120 "$tmp/node-w2.err" 'train\[0\]: epoch [0-9]\+ step'
    start_node w3 "127.0.0.1:$p3"
    t_start=$(date +%s.%N)
    if [[ $case_name == trainer_joins_resume* ]]; then
      for ((i = 0; i < 600; ++i)); do
        awk '/joined on host/ { j = 1 } j && /checkpoint at step [0-9]+ written/ { found = 1 } END { exit !found }' "$tmp/err" && break
        alive $job || break
        sleep 0.05
      done
      awk '/joined on host/ { j = 1 } j && /checkpoint at step [0-9]+ written/ { found = 1 } END { exit !found }' "$tmp/err" \
        || fail "no checkpoint after train[1] joined"
      pkill -KILL -P "$job" actorflow 2>/dev/null || true
      kill -KILL "$job" 2>/dev/null
      wait "$job" 2>/dev/null
      grep -q "finished" "$tmp/out" && fail "the job finished before it was killed: make it longer"
      echo "the coordinator was killed after a checkpoint with train[1]: $(grep -o 'checkpoint at step [0-9]* written' "$tmp/err" | tail -1)"
      wait_log w3 "node: job ended" 15
      job_args=(--resume)
      start_job 120 "$tmp/node-w2.err" 'node: started train\[0\]'
    fi
    wait $job; rc=$?
    echo "the job ended (exit $rc) $(since "$t_start") s after w3 started"
    expect_rc 0
    expect_out "job 'multi-killed' finished"
    expect_out "^  joined: train\[1\] on host 'w3' [0-9.]\+ s after the start$"
    grep '^  joined: ' "$tmp/out"
    ! grep -q 'replica lost' "$tmp/out" || fail "a replica was lost without a fault"
    node_has w1 "batch\[0\]: consumer 'train\[1\]' joins"
    node_has w3 "node: started train\[1\]"
    node_has w3 "train\[1\]: [0-9]\+ steps, [1-9][0-9]* samples, "
    grep "train\[[01]\]: [0-9]* steps, " "$tmp/node-w2.err" "$tmp/node-w3.err"
    python3 "$here/record_ids.py" exactly-once --by-epoch --epochs 30 --records 40000 \
      "$tmp"/ids-0.txt "$tmp"/ids-1.txt \
      || fail "with a trainer that joined, the record ids are not every record once per epoch"
    read_auc; expect_auc_near_planted
    if [[ $case_name == trainer_joins_resume* ]]; then
      expect_err "train\[1\] had joined the job before the checkpoint; it is not started again"
      expect_out "^  resumed from $tmp/ckpt/ckpt-"
    fi
    wait_log w3 "node: job ended" 15
    ;;
  trainer_node_frozen)
    # As trainer_node_killed, but w3 is frozen (SIGSTOP): its process and
    # sockets stay, only the heartbeats stop, and the coordinator drops it
    # after the 3 s connection timeout.
    trainer_lost_setup
    # w3 (trainer replica 1) is frozen once it has trained.
    freeze w3
    expect_trainer_lost "w3 was frozen" "$t_stop"
    trained_ids_after_loss
    alive "${watcher[w1]}" && alive "${watcher[w2]}" || fail "a surviving node is gone"
    wait_log w1 "node: job ended" 15
    wait_log w2 "node: job ended" 15
    thaw w3
    expect_clean_end w3
    echo "node w3, thawed, exited with ${node_rc[w3]} on SIGTERM"
    ;;
  shard_node_frozen)
    shard_frozen node
    ;;
  shard_node_killed)
    shard_killed other
    ;;
  reader_node_killed)
    reader_killed
    ;;
  decoder_node_killed)
    decoder_killed
    ;;
  chain_node_killed)
    chain_killed
    ;;
  shard_node_restarted)
    shard_killed restarted
    ;;
  shard_node_frozen_restored)
    shard_killed frozen
    ;;
  shard_node_frozen_local_trainers)
    shard_frozen local
    ;;
  cache_resume)
    # A cache on a node is checkpointed, and a job resumed from a cut in
    # its replay (its reader ended before the cut) runs on the same nodes:
    # the reader, ended again at once, must not be gone before the cache
    # on its node reads its wiring (CAF then hands the cache a null handle
    # for it: the node crashed there). Each (epoch, record) exactly once,
    # by the sink's record ids.
    images=$(dpkg -L dataset-fashion-mnist 2>/dev/null | grep 't10k-images-idx3' | head -1)
    [ -n "$images" ] || skip_missing "needs Debian's dataset-fashion-mnist"
    start_node w1; start_node w2
    topology multi_cache "${port[w1]}" "${port[w2]}"
    sed -i -e "s|@IMAGES@|$images|" -e "s|@LABELS@|${images/images-idx3/labels-idx1}|" \
      -e "s|@IDS@|$tmp/ids.txt|" -e "s|@D@|$tmp/ckpt|" "$topo"
    start_job 60 "$tmp/ids.txt" '^[0-9]\+ 1 '
    # The sink consumes epoch 1 (a replay): the next checkpoint is cut in
    # the replay. Then the coordinator is killed.
    touch "$tmp/replaying"
    for ((i = 0; i < 100; ++i)); do
      [ -n "$(find "$tmp/ckpt" -name MANIFEST -newer "$tmp/replaying" 2>/dev/null)" ] && break
      alive $job || break
      sleep 0.1
    done
    [ -n "$(find "$tmp/ckpt" -name MANIFEST -newer "$tmp/replaying" 2>/dev/null)" ] \
      || fail "no checkpoint within 10 s of the replay's start"
    # (The run itself, then its timeout(1) wrapper.)
    pkill -KILL -P "$job" 2>/dev/null
    kill -KILL "$job" 2>/dev/null
    wait $job 2>/dev/null
    job=
    echo "killed the coordinator after a checkpoint in the replay"
    run_limited 60 run "$topo" --no-progress --resume
    expect_rc 0
    expect_out "^  resumed from $tmp/ckpt/ckpt-"
    # The reader had ended at the cut: it read nothing in the resumed run.
    expect_out "^  read  *1  *0  *0 "
    python3 "$here/record_ids.py" exactly-once --by-epoch --epochs 3 --records 10000 \
      "$tmp/ids.txt" || fail "the sink's record ids: not every record exactly once per epoch"
    expect_clean_end
    ;;
  batcher_node_frozen)
    # The batcher's node gets SIGSTOP after the first checkpoint: the
    # coordinator misses it after the heartbeat timeout, and the probe
    # before the restart must not take it for alive (CAF still holds its
    # connection, so only the node's own answer tells): the job starts
    # again with the batcher on w3 and finishes, each (epoch, record)
    # exactly once. Thawed, w2 ends its part of the job.
    start_multi_restart
    start_job 90 "$tmp/err" 'checkpoint at step [0-9]\+ written'
    freeze w2
    wait $job; rc=$?
    echo "the job ended (exit $rc) $(since "$t_stop") s after the SIGSTOP"
    expect_rc 0
    expect_out "job 'multi-restart' finished"
    took=$(awk -v a="$t_stop" -v b="$(log_time "$(grep -m1 'resuming from' "$tmp/err")")" \
      'BEGIN { printf "%.2f", b - a }')
    echo "started again $took s after the SIGSTOP"
    expect_out "^  restarted: after losing [a-z]*\[0\] (exit_reason(remote_link_unreachable)) .*; batch\[0\] from host 'w2' to 'w3'$"
    expect_out "^  started 2 times; "
    python3 "$here/record_ids.py" exactly-once --by-epoch --epochs 4 --records 10000 \
      "$tmp/ids.txt" || fail "the sink's record ids: not every record exactly once per epoch"
    thaw w2
    wait_log w1 "node: job ended" 15
    wait_log w3 "node: job ended" 15
    expect_clean_end
    ;;
  restarts_off)
    # --max-restarts 0: a job with checkpoints that loses its batcher's
    # node fails as before, naming a stage, and is not started again.
    start_multi_restart
    job_args=(--max-restarts 0)
    start_job 90 "$tmp/err" 'checkpoint at step [0-9]\+ written'
    kill -KILL "${node_pid[w2]}"
    echo "killed node w2 (pid ${node_pid[w2]}), the batcher's"
    wait $job; rc=$?
    echo "the job ended (exit $rc)"
    expect_rc 1
    expect_out "job 'multi-restart' failed"
    expect_err "^actorflow: stage [a-z]*\[0\] "
    grep '^actorflow: ' "$tmp/err"
    ! grep -q 'restarting the job\|resuming from' "$tmp/err" || fail "the job was started again"
    ! grep -q '^  restarted: ' "$tmp/out" || fail "the summary lists a restart"
    wait_log w1 "node: job ended" 15
    expect_clean_end w2
    ;;
  batcher_node_killed)
    # The only replica of a stage that nothing can take over (a batcher)
    # is lost with its node, twice: `actorflow run` starts the job again
    # from its newest checkpoint with the batcher on the next host of its
    # placement (w2, then w3), and once w3 is lost too, on w2 again, which
    # is back at its address by then (docs/multi-host.md, "Restarting
    # after a lost node"). The sink's record ids: each (epoch, record)
    # exactly once (what was consumed after the checkpoint a restart
    # continues from is cut from the list, and comes again).
    start_multi_restart
    start_job 90 "$tmp/err" 'checkpoint at step [0-9]\+ written'
    t_kill=$(date +%s.%N)
    kill -KILL "${node_pid[w2]}"
    echo "killed node w2 (pid ${node_pid[w2]}), the batcher's"
    # Started again, and a checkpoint written since: then w3 goes too,
    # and w2 comes back at its address.
    lines=$(wc -l <"$tmp/err")
    for ((i = 0; i < 300; ++i)); do
      tail -n +$((lines + 1)) "$tmp/err" | grep -q 'restarting the job after losing' \
        && break
      alive $job || break
      sleep 0.1
    done
    tail -n +$((lines + 1)) "$tmp/err" | grep -q 'restarting the job after losing' \
      || fail "no restart within 30 s of losing w2"
    echo "started again $(since "$t_kill") s after the kill (as the test saw it)"
    lines=$(grep -n 'restarting the job' "$tmp/err" | tail -n 1 | cut -d: -f1)
    for ((i = 0; i < 300; ++i)); do
      tail -n +$((lines + 1)) "$tmp/err" | grep -q 'checkpoint at step [0-9]\+ written' && break
      alive $job || break
      sleep 0.1
    done
    alive $job || fail "the job ended before a checkpoint after its restart"
    t_kill=$(date +%s.%N)
    kill -KILL "${node_pid[w3]}"
    echo "killed node w3 (pid ${node_pid[w3]}), the batcher's after the restart"
    start_node w2b "127.0.0.1:${port[w2]}"
    echo "node w2b listens at w2's address $(since "$t_kill") s after the kill"
    wait $job; rc=$?
    took=$(awk -v a="$t_kill" -v b="$(log_time "$(grep 'resuming from' "$tmp/err" | tail -n 1)")" \
      'BEGIN { printf "%.2f", b - a }')
    echo "started again on w2b $took s after w3 was killed"
    echo "the job ended (exit $rc)"
    expect_rc 0
    expect_out "job 'multi-restart' finished"
    expect_out "^  restarted: after losing [a-z]*\[0\] (exit_reason(remote_link_unreachable)) [0-9.]\+ s into the run (.*): from $tmp/ckpt/ckpt-[0-9]\+ (step [0-9]\+); batch\[0\] from host 'w2' to 'w3'$"
    expect_out "^  restarted: after losing [a-z]*\[0\] (exit_reason(remote_link_unreachable)) .*: from $tmp/ckpt/ckpt-[0-9]\+ (step [0-9]\+); batch\[0\] from host 'w3' to 'w2'$"
    expect_out "^  started 3 times; "
    grep '^  restarted: \|^  started ' "$tmp/out"
    node_has w2b "node: started batch\[0\]"
    python3 "$here/record_ids.py" exactly-once --by-epoch --epochs 4 --records 10000 \
      "$tmp/ids.txt" || fail "the sink's record ids: not every record exactly once per epoch"
    wait_log w1 "node: job ended" 15
    wait_log w2b "node: job ended" 15
    expect_clean_end w2 w3
    ;;
  input_node_killed_training)
    restart_training input
    ;;
  trainer_node_killed_checkpoints)
    restart_training trainer
    ;;
  bind_loopback)
    start_node w1 0
    p=${port[w1]}
    listening=$(ss -ltnH "sport = :$p")
    [ -n "$listening" ] || fail "ss shows nothing listening on port $p"
    echo "$listening"
    # Local address column: 127.0.0.1:PORT on every line, nothing wider.
    echo "$listening" | awk -v want="127.0.0.1:$p" '$4 != want { bad = 1 } END { exit bad }' \
      || fail "port $p is not bound to 127.0.0.1 only"
    # Its data port (runtime/net/data_plane.hpp) binds there too, and the
    # node's process listens nowhere else.
    wait_log w1 "node: data port 127.0.0.1:" 10
    dp=$(grep -o 'node: data port 127.0.0.1:[0-9]*' "$tmp/node-w1.err" | head -n 1)
    dp=${dp##*:}
    [ -n "$dp" ] && [ "$dp" != "$p" ] || fail "no data port of its own in the node's log"
    mine=$(ss -ltnpH | grep "pid=${node_pid[w1]},")
    [ -n "$mine" ] || fail "ss shows no listening socket of pid ${node_pid[w1]}"
    echo "$mine"
    echo "$mine" | awk -v a="127.0.0.1:$p" -v b="127.0.0.1:$dp" \
      '$4 != a && $4 != b { bad = 1 } END { exit bad }' \
      || fail "node listens elsewhere too: $mine"
    [ "$(echo "$mine" | awk '{ print $4 }' | sort -u | wc -l)" -eq 2 ] \
      || fail "the node does not listen on both its port and its data port: $mine"
    expect_clean_end
    ;;
  coordinator_bytes)
    # job_progress::coordinator_bytes (docs/multi-host.md, "Bytes through
    # the coordinator"). Items from w1 (source, batcher) to the trainers
    # on w2 and w3, their credit, and every PS request and answer between
    # the trainers and the shards on w1 go on the data plane, straight
    # between the nodes: the coordinator's connections carry control
    # messages only, at most 1% of the data between nodes (through CAF
    # 0.17's relay they were 245% of it). A job in one process moves
    # nothing there.
    start_node w1; start_node w2; start_node w3
    topology multi_killed "${port[w1]}" "${port[w2]}" "${port[w3]}"
    run_limited 90 run "$topo" --no-progress --report-json "$tmp/report.json"
    expect_rc 0
    expect_out "through the coordinator: "
    grep "network:\|through the coordinator" "$tmp/out"
    expect_err "data plane: 3 nodes connected directly"
    for n in w1 w2 w3; do node_has "$n" "data port 127.0.0.1:"; done
    # Processes of one machine and network namespace: Unix sockets, the
    # tensors in memory the two processes share.
    expect_err "data plane: connected to w1 over a Unix socket with shared memory"
    node_has w2 "data plane: .* over a Unix socket with shared memory"
    ! grep -h "data plane: .* over TCP" "$tmp/err" "$tmp"/node-w*.err \
      || fail "peers on one machine connected over TCP"
    expect_coordinator_share "$tmp/report.json"
    run_limited 60 run "$data/train_ctr.pbtxt" --no-progress --report-json "$tmp/local.json"
    expect_rc 0
    ! grep -q "through the coordinator" "$tmp/out" || fail "a job in one process reports bytes through the coordinator"
    python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["coordinator_bytes"] != 0)' \
      "$tmp/local.json" || fail "a job in one process has coordinator_bytes"
    for n in w1 w2 w3; do wait_log "$n" "node: job ended" 15; done
    expect_clean_end
    # w1 sent the items and the shards' answers through shared memory, and
    # every message found room there.
    node_has w1 "[1-9][0-9.]* \?[kMG]\?B sent through shared memory, 0 messages through a socket"
    ;;
  data_link_cut)
    # A data connection that breaks while both nodes live on and stay
    # connected to the coordinator (runtime/net/data_plane.hpp; the failpoint
    # closes w2's after 300 frames, as a cut link would): train[0] on w2
    # loses its input from batch[0] on w1 as if w1 were lost, fails, and
    # the job goes on with train[1], instead of waiting for ever for the
    # items that were in flight on the connection. batch[0] returns their
    # credit.
    start_node w1
    AF_FAILPOINT=data_plane.cut:300 start_node w2
    start_node w3
    topology multi_killed "${port[w1]}" "${port[w2]}" "${port[w3]}"
    run_limited 90 run "$topo" --no-progress
    expect_rc 0
    expect_out "job 'multi-killed' finished"
    expect_out "replica lost, job went on: train\[0\]: input from 'batch\[0\]' went down before its end of stream: exit_reason(remote_link_unreachable)"
    node_has w2 "failpoint data_plane.cut: the connection is cut"
    node_has w1 "consumer 'train\[0\]' went down (exit_reason(remote_link_unreachable))"
    read_auc; expect_auc_near_planted
    for n in w1 w2 w3; do wait_log "$n" "node: job ended" 15; done
    expect_clean_end
    ;;
  *)
    echo "unknown case $case_name"; exit 2 ;;
esac
echo "PASS: $case_name"
