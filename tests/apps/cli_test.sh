#!/usr/bin/env bash
# Behaviour of the actorflow binary as a user sees it: exit codes, messages,
# progress and interrupts. Usage: cli_test.sh ACTORFLOW CASE
set -u
bin=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
data=$here/data
examples=$here/../../apps/examples
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=../support/skip.sh
source "$here/../support/skip.sh"

fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$tmp/out"; echo "--- stderr"; cat "$tmp/err"; exit 1; }
run() { "$bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?; }
expect_rc() { [ "$rc" -eq "$1" ] || fail "expected exit code $1, got $rc"; }
expect_out() { grep -q -- "$1" "$tmp/out" || fail "stdout lacks '$1'"; }
expect_err() { grep -q -- "$1" "$tmp/err" || fail "stderr lacks '$1'"; }
# run with a time limit: a hang shows as exit code 124 (or 137).
run_limited() { local limit=$1; shift
  timeout -k 5 "$limit" "$bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?; }
# expect_err_line FILE PATTERN MESSAGE: stderr has "FILE:N: MESSAGE" where N
# is the line of FILE that matches PATTERN (grep -F).
expect_err_line() {
  local line
  line=$(grep -nF -- "$2" "$data/$1" | head -1 | cut -d: -f1)
  [ -n "$line" ] || fail "$1 lacks '$2'"
  grep -qF -- "$1:$line: $3" "$tmp/err" || fail "stderr lacks '$1:$line: $3'"
}

case $case_name in
  help)
    run --help; expect_rc 0; expect_out "run"; expect_out "validate"
    run run --help; expect_rc 0; expect_out "--threads"
    run validate --help; expect_rc 0; expect_out "--list-types"
    ;;
  version)
    run --version; expect_rc 0; expect_out "^actorflow [0-9]\+\.[0-9]\+\.[0-9]\+$"
    # The version lives in one place (CMakeLists.txt's project()); the
    # binary and CHANGELOG.md's newest entry agree with it (the CMake
    # package: embed.example).
    root=$here/../..
    want=$(sed -n 's/^project(ActorFlow VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
    [ -n "$want" ] || fail "no version in CMakeLists.txt's project()"
    expect_out "^actorflow $want$"
    newest=$(grep -m1 '^## ' "$root/CHANGELOG.md" | awk '{print $2}')
    [ "$newest" = "$want" ] || fail "CHANGELOG.md's newest entry is '$newest', the project is $want"
    ;;
  usage)
    run; expect_rc 2
    run validate "$data/small.pbtxt" --log-level debug; expect_rc 0
    run frobnicate; expect_rc 2
    run run; expect_rc 2; expect_err "topology is required"
    run run "$data/small.pbtxt" --threads -1; expect_rc 2
    run --log-level loud validate "$data/small.pbtxt"; expect_rc 2
    ;;
  validate)
    run validate "$data/small.pbtxt"; expect_rc 0; expect_out "ok (4 stages, 5 stage replicas)"
    run validate "$examples/demo.pbtxt"; expect_rc 0
    run validate "$data/invalid.pbtxt"; expect_rc 2
    expect_err "invalid.pbtxt:3: stage 'decode': unknown stage type 'transfrom'"
    expect_err "invalid.pbtxt:4: stage 'sink': input 'decoder' names a stage that does not exist"
    run validate --list-types; expect_rc 0; expect_out "synthetic_source"; expect_out "batcher"
    expect_out "hash_bucket"; expect_out "numeric"; expect_out "bucket_by_length"
    # Under a type's line, its config block with the fields it requires.
    expect_out "^ *batcher { batch_size: N }$"
    # The case study's topology (its data is made by example.criteo_like;
    # validation only needs its files to exist).
    mkdir -p "$tmp/criteo" && : >"$tmp/criteo/train-0.tfrecord" && : >"$tmp/criteo/test-0.tfrecord"
    sed "s|build/data/criteo_like/|$tmp/criteo/|" "$examples/criteo_like.pbtxt" >"$tmp/criteo.pbtxt"
    run validate "$tmp/criteo.pbtxt"; expect_rc 0; expect_out "ok (13 stages, 19 stage replicas)"
    ;;
  bad_files)
    run validate "$tmp/none.pbtxt"; expect_rc 2; expect_err "none.pbtxt: cannot open"
    : >"$tmp/empty.pbtxt"
    run run "$tmp/empty.pbtxt"; expect_rc 2; expect_err "file is empty"
    head -c 65536 /dev/urandom >"$tmp/garbage.pbtxt"
    run run "$tmp/garbage.pbtxt"; expect_rc 2; expect_err "garbage.pbtxt"
    head -c 100000000 /dev/zero | tr '\0' ' ' >"$tmp/big.pbtxt"
    run validate "$tmp/big.pbtxt"; expect_rc 2; expect_err "limited to 16 MiB"
    cp "$data/small.pbtxt" "$tmp/unreadable.pbtxt"
    chmod 000 "$tmp/unreadable.pbtxt"
    chmod 755 "$tmp"
    if [ "$(id -u)" -eq 0 ]; then
      # root reads anything: check as an unprivileged user instead, with a
      # copy of the binary that user can reach.
      cp "$bin" "$tmp/actorflow"
      setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$tmp/actorflow" validate "$tmp/unreadable.pbtxt" >"$tmp/out" 2>"$tmp/err" </dev/null
      rc=$?
    else
      run validate "$tmp/unreadable.pbtxt"
    fi
    expect_rc 2; expect_err "unreadable.pbtxt: cannot open: Permission denied"
    ;;
  run_ok)
    run run "$data/small.pbtxt"; expect_rc 0
    expect_out "job 'small' finished"
    expect_out "delivered: 20000 records"
    expect_out "throughput: "
    ;;
  bottleneck)
    # The slow transform (0.1 ms per record) holds the job back: the report
    # names it, and --report-json says the same.
    run run "$data/bottleneck.pbtxt" --report-json "$tmp/report.json"; expect_rc 0
    expect_out "^  bottleneck: slow is the bottleneck: 1 replica busy [0-9]\+% - it needs more replicas (cores), or less work per record$"
    python3 - "$tmp/report.json" <<'PY' || fail "report.json does not say the same"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["job"] == "bottleneck" and r["ok"] is True, r
names = [s["name"] for s in r["stages"]]
assert names == ["read", "slow", "sink"], names
slow = r["stages"][1]
assert slow["busy"] > 0.5 and slow["items_in"] == 100, slow
assert r["stages"][0]["wait_credit"] > 0.5, r["stages"][0]
assert r["bottleneck"]["stage"] == "slow", r["bottleneck"]
print("report.json:", r["bottleneck"]["hint"])
PY
    ;;
  run_failure)
    run run "$data/failing.pbtxt"; expect_rc 1
    expect_err "actorflow: stage decode\[0\] failed: fault injected at item 100"
    [ "$(grep -c '^actorflow: ' "$tmp/err")" -eq 1 ] || fail "expected one error line"
    ;;
  progress_log)
    # Without a terminal, progress comes as periodic log lines.
    "$bin" run "$data/long.pbtxt" --log-every 1 >"$tmp/out" 2>"$tmp/err" </dev/null &
    pid=$!
    sleep 3.5
    kill -INT $pid
    wait $pid; rc=$?
    expect_rc 130
    [ "$(grep -c 'progress: ' "$tmp/err")" -ge 2 ] || fail "expected progress lines"
    ;;
  interrupt)
    "$bin" run "$data/long.pbtxt" >"$tmp/out" 2>"$tmp/err" </dev/null &
    pid=$!
    sleep 1.5
    kill -INT $pid
    wait $pid; rc=$?
    expect_rc 130
    expect_out "job 'long' stopped early"
    expect_err "draining"
    ;;
  abort)
    # A second interrupt, well after the first, aborts a slow drain.
    "$bin" run "$data/slow_drain.pbtxt" >"$tmp/out" 2>"$tmp/err" </dev/null &
    pid=$!
    # Once the job runs (its signal handlers are in place; loading libtorch
    # under the sanitizers takes about a second before that), then 1 s more.
    for ((i = 0; i < 100; ++i)); do
      grep -q "job 'slow_drain'" "$tmp/err" && break
      sleep 0.1
    done
    sleep 1
    kill -INT $pid
    sleep 1
    kill -INT $pid
    wait $pid; rc=$?
    expect_rc 130
    expect_err "aborted by a second interrupt"
    ;;
  convert)
    fm=$(dpkg -L dataset-fashion-mnist 2>/dev/null | grep 't10k-images') || true
    [ -n "$fm" ] || skip_missing "dataset-fashion-mnist is not installed"
    labels=${fm/images-idx3/labels-idx1}
    run convert idx --images "$fm" --labels "$labels" --out "$tmp/t10k" --shards 3
    expect_rc 0; expect_out "wrote 10000 records to 3 files"
    run inspect "$tmp/t10k-00001-of-00003.tfrecord" --show 1
    expect_rc 0; expect_out "3333 records"; expect_out "CRC check: every record is intact"
    expect_out "image            bytes"
    # Converting again gives the same bytes.
    run convert idx --images "$fm" --labels "$labels" --out "$tmp/again" --shards 3
    cmp -s "$tmp/t10k-00001-of-00003.tfrecord" "$tmp/again-00001-of-00003.tfrecord" \
      || fail "two conversions of the same data differ"
    # A flipped byte makes inspect fail and name the offset.
    cp "$tmp/t10k-00000-of-00003.tfrecord" "$tmp/bad.tfrecord"
    byte=$(od -An -tu1 -j100 -N1 "$tmp/bad.tfrecord" | tr -d ' ')
    printf "\\$(printf %03o $((byte ^ 255)))" | dd of="$tmp/bad.tfrecord" bs=1 seek=100 conv=notrunc 2>/dev/null
    run inspect "$tmp/bad.tfrecord"; expect_rc 1; expect_err "bad.tfrecord: offset 0: corrupt record data"
    # With on_corrupt: skip, the job goes on and reports what it skipped:
    # by the sink's record ids, exactly the corrupt record 0 is left out,
    # every other record of the file arrives once, under its own number.
    printf 'stage { name: "r" type: "tfrecord_source" tfrecord_source { files: "%s" on_corrupt: "skip" } }\nstage { name: "s" type: "sink" input { stage: "r" } sink { record_ids: "%s" } }\n' "$tmp/bad.tfrecord" "$tmp/skip-ids.txt" > "$tmp/skip.pbtxt"
    run run "$tmp/skip.pbtxt" --no-progress; expect_rc 0
    expect_out "delivered: 3332 records"
    expect_err "1 corrupt records skipped in all"
    python3 "$here/record_ids.py" exactly-once --epochs 1 --tfrecords "$tmp/bad.tfrecord" \
      --skipped 0 "$tmp/skip-ids.txt" || fail "the records delivered are not the file's minus the corrupt one"
    printf 'a,b,c\n1,x,0.5\n2,"y, z",1.5\n' > "$tmp/t.csv"
    run convert csv "$tmp/t.csv" --column a:int64 --column b:string --column c:float --out "$tmp/csv"
    expect_rc 0; expect_out "wrote 2 records to 1 files"
    run inspect "$tmp/csv-00000-of-00001.tfrecord" --json --show all
    expect_rc 0; expect_out '"c": {"float_list": \[1.5\]}'
    printf 'a,b,c\n1,x,0.5\nnope,y,1\n' > "$tmp/bad.csv"
    run convert csv "$tmp/bad.csv" --column a:int64 --out "$tmp/bad"
    expect_rc 1; expect_err "bad.csv:3: column 'a': 'nope' is not an int64"
    # Empty cells: a bad row without a default, the default with one.
    printf 'a,b,c\n1,x,0.5\n,,\n' > "$tmp/gaps.csv"
    run convert csv "$tmp/gaps.csv" --column a:int64 --out "$tmp/gaps"
    expect_rc 1; expect_err "gaps.csv:3: column 'a': '' is not an int64"
    run convert csv "$tmp/gaps.csv" --column a:int64:-1 --column b:string:none \
      --column c:float:2.5 --out "$tmp/gaps"
    expect_rc 0; expect_out "wrote 2 records to 1 files"
    run inspect "$tmp/gaps-00000-of-00001.tfrecord" --json --show all; expect_rc 0
    expect_out '"a": {"int64_list": \[-1\]}'
    expect_out '"c": {"float_list": \[2.5\]}'
    expect_out '"b": {"bytes_list": \["'"$(printf none | base64)"'"\]}'
    run convert csv "$tmp/gaps.csv" --column a:int64:x --out "$tmp/gaps"
    expect_rc 2; expect_err "--column a:int64:x: the default 'x' is not an int64"
    mkdir -p "$tmp/imgs/cls"; cp "$here/../fuzz/corpus/image/"*.jpg "$tmp/imgs/cls/"
    # PNG and WebP by content, whatever the name says.
    cp "$here/../fuzz/corpus/png/rgb_12x5.png" "$tmp/imgs/cls/png_named.jpg"
    cp "$here/../fuzz/corpus/webp/lossy_16x12.webp" "$tmp/imgs/cls/picture.dat"
    echo "not an image" > "$tmp/imgs/cls/readme.txt"
    run convert images "$tmp/imgs" --out "$tmp/imgs-out"
    expect_rc 0; expect_out "skipped 1 files that are not JPEG, PNG or WebP images"
    expect_out "wrote 7 records"
    # Every image's bytes, as they are in its file.
    run inspect "$tmp/imgs-out-00000-of-00001.tfrecord" --json --show all; expect_rc 0
    python3 - "$tmp/out" "$tmp/imgs/cls" <<'PY' || fail "convert images changed or lost an image's bytes"
import base64, glob, json, os, sys
got = sorted(base64.b64decode(json.loads(line)["features"]["image"]["bytes_list"][0])
             for line in open(sys.argv[1]) if line.startswith("{"))
want = sorted(open(p, "rb").read() for p in glob.glob(os.path.join(sys.argv[2], "*"))
              if not p.endswith("readme.txt"))
sys.exit(0 if got == want and len(got) == 7 else 1)
PY
    ;;
  autotune)
    run run "$data/autotune.pbtxt"; expect_rc 0
    expect_err "autotune: measuring the pipeline"
    expect_out "autotune: decode replicas 1 -> 2"
    ;;
  terminal)
    # On a terminal the progress display is one line rewritten in place.
    # Ctrl-C (SIGINT) comes once the line was rewritten, however long
    # the start takes (a fixed 2 s could come first under load). `set -m`:
    # a background job of a shell without job control ignores SIGINT.
    command -v script >/dev/null || skip_missing "script(1) is not installed (bsdutils)"
    script -qefc "set -m; '$bin' run '$data/long.pbtxt' & pid=\$!
      for i in \$(seq 600); do grep -qP '\r\x1b\[K.*records/s' '$tmp/typescript' && break; sleep 0.1; done
      kill -INT \$pid; wait \$pid" "$tmp/typescript" >"$tmp/out" 2>&1 </dev/null
    rc=$?
    expect_rc 130
    expect_out "job 'long' stopped early"
    # The live line: carriage return, erase-line, counters.
    grep -q $'\r\033\[K.*records/s' "$tmp/typescript" || fail "no live progress line"
    [ "$(grep -c 'progress: ' "$tmp/typescript")" -eq 0 ] || fail "log lines on a terminal"
    ;;
  train_ctr)
    # Sharded embedding, 2 trainers, a held-out split: the model gets close
    # to the planted model's AUC.
    run_limited 60 run "$data/train_ctr.pbtxt" --log-level info \
      --report-json "$tmp/report.json"; expect_rc 0
    expect_out "job 'train-ctr' finished"
    # Each trainer replica's use of its time (the seed's "GPU utilization"),
    # in the summary and the JSON report, as shares that add up.
    for r in 0 1; do
      expect_out "^  utilization of train\[$r\]: busy [0-9]\+% (of which waiting for parameters [0-9]\+%), waiting for input [0-9]\+%$"
    done
    python3 - "$tmp/report.json" <<'PY' || fail "utilization in the JSON report"
import json, sys
u = json.load(open(sys.argv[1]))["utilization"]
assert [x["replica"] for x in u] == ["train[0]", "train[1]"], u
for x in u:
    # Both trainers trained and waited for input at some point; pulls
    # from the shards take part of every step.
    assert 0 < x["busy"] <= 1 and 0 < x["input_wait"] < 1, x
    assert x["param_wait"] > 0, x
PY
    expect_out "^  training: [0-9]\+ steps, 100000 samples, "
    expect_out "^  test (step [0-9]\+): loss [0-9.]\+, AUC [0-9.]\+ (planted model's AUC [0-9.]\+)$"
    steps=$(sed -n 's/^  training: \([0-9]*\) steps.*/\1/p' "$tmp/out")
    read -r at auc ref <<<"$(sed -n "s/^  test (step \([0-9]*\)): loss [0-9.]*, AUC \([0-9.]*\) (planted model's AUC \([0-9.]*\))$/\1 \2 \3/p" "$tmp/out")"
    # The last evaluation saw every step (and was logged at info level).
    [ "$at" = "$steps" ] || fail "final evaluation at step $at, training ran $steps steps"
    expect_err "evaluate\[0\]: final, step $steps: test loss [0-9.]*, AUC $auc (reference $ref)"
    expect_err "train\[0\]: [0-9]\+ steps"
    expect_err "train\[1\]: [0-9]\+ steps"
    awk -v a="$auc" -v r="$ref" 'BEGIN { d = a - r; if (d < 0) d = -d; exit !(r > 0.8 && d <= 0.03) }' \
      || fail "AUC $auc is not within 0.03 of the planted model's $ref"
    ;;
  train_slots)
    # trainer { concurrent_steps: 1 } (docs/training.md): the 2 trainers
    # take turns, so no push is stale; the summary, the JSON report and the
    # bottleneck line show the wait for a step slot. With a staleness
    # bound it is refused, on the line of concurrent_steps.
    sed -e 's/^  ps { shards: 2 staleness: 2 }$/  ps { shards: 2 }/' \
        -e 's/^  trainer { log_every_steps: 0 }$/  trainer { log_every_steps: 0 concurrent_steps: 1 }/' \
        "$data/train_ctr.pbtxt" >"$tmp/slots.pbtxt"
    grep -q 'concurrent_steps: 1' "$tmp/slots.pbtxt" && ! grep -q 'staleness' "$tmp/slots.pbtxt" \
      || fail "could not set concurrent_steps in train_ctr.pbtxt"
    run_limited 60 run "$tmp/slots.pbtxt" --report-json "$tmp/report.json"; expect_rc 0
    expect_out "^  training: [0-9]\+ steps, 100000 samples, .*, max staleness 0$"
    for r in 0 1; do
      expect_out "^  utilization of train\[$r\]: busy [0-9]\+% (of which waiting for parameters [0-9]\+%, for a step slot [0-9]\+%), waiting for input [0-9]\+%$"
    done
    expect_out "^  step time of train ([0-9]\+ steps timed), ms: [0-9.]\+ = prepare [0-9.]\+ + step slot [0-9.]\+ + pull "
    # Each trainer waits about half its time for the one slot: the hint
    # does not ask for more trainers.
    expect_out "^  bottleneck: train is the bottleneck: 2 replicas busy [0-9]\+% - [0-9]\+% of it waiting for a step slot - the cores of its concurrent_steps are the limit"
    python3 - "$tmp/report.json" <<'PY' || fail "slot_wait in the JSON report"
import json, sys
r = json.load(open(sys.argv[1]))
u = r["utilization"]
assert [x["replica"] for x in u] == ["train[0]", "train[1]"], u
for x in u:
    # A part of the busy time, as the wait for parameters is.
    assert 0 <= x["slot_wait"] <= x["busy"], x
    assert x["param_wait"] + x["slot_wait"] <= x["busy"] + 1e-3, x
assert "slot_wait_ms" in r["step_time"][0], r["step_time"]
for m in ("train[0]", "train[1]"):
    assert r["metrics"][m]["wait_slot_s"] >= 0, r["metrics"][m]
PY
    sed -e 's/^  trainer { log_every_steps: 0 }$/  trainer { log_every_steps: 0 concurrent_steps: 1 }/' \
        "$data/train_ctr.pbtxt" >"$tmp/slots_bound.pbtxt"
    run validate "$tmp/slots_bound.pbtxt"; expect_rc 2
    line=$(grep -n 'concurrent_steps: 1' "$tmp/slots_bound.pbtxt" | cut -d: -f1)
    grep -qF "slots_bound.pbtxt:$line: stage 'train': concurrent_steps cannot go with training.ps.staleness" "$tmp/err" \
      || fail "stderr lacks the refusal of concurrent_steps with a staleness bound at line $line"
    ;;
  train_resume)
    # Checkpoints while training; the coordinator is killed (SIGKILL) once
    # one is written, and `run --resume` finishes the job. Each trainer
    # lists the records it trained (record_ids): on resume it cuts its
    # list at the checkpoint's step, so the lists say which records the
    # final model was trained on. docs/checkpoints.md promises that no
    # record is trained twice or skipped: each of the 20000 records exactly
    # once in each of the 30 epochs, by id. And the model is as good as an
    # uninterrupted run's (whose lists say the same).
    sed -e 's/epochs: 5/epochs: 30/' \
        -e 's/runtime { seed: 3 }/runtime { seed: 3 metrics_interval_s: 0.05 }/' \
        -e "s|trainer { log_every_steps: 0 }|trainer { log_every_steps: 0 record_ids: \"$tmp/ids-{replica}.txt\" }|" \
        "$data/train_ctr.pbtxt" >"$tmp/plain.pbtxt"
    grep -q "metrics_interval_s: 0.05" "$tmp/plain.pbtxt" || fail "the topology template changed"
    grep -q "record_ids: " "$tmp/plain.pbtxt" || fail "the topology template changed (trainer block)"
    { cat "$tmp/plain.pbtxt"
      echo "checkpoint { dir: \"$tmp/ckpt\" every_steps: 300 keep: 2 }"; } >"$tmp/ckpt.pbtxt"
    auc_of() { sed -n "s/^  test (step [0-9]*): loss [0-9.]*, AUC \([0-9.]*\) .*/\1/p" "$1"; }
    check_ids() { python3 "$here/record_ids.py" exactly-once --by-epoch --epochs 30 --records 20000 \
      "$tmp"/ids-0.txt "$tmp"/ids-1.txt || fail "the trainers' record ids break the promise ($1)"; }
    run_limited 120 run "$tmp/plain.pbtxt" --no-progress; expect_rc 0
    expect_out "training: [0-9]\+ steps, 600000 samples"
    plain_auc=$(auc_of "$tmp/out")
    check_ids "uninterrupted run"
    rm -f "$tmp"/ids-*.txt
    timeout -k 5 120 "$bin" run "$tmp/ckpt.pbtxt" --no-progress >"$tmp/out1" 2>"$tmp/err1" </dev/null &
    job=$!
    for _ in $(seq 3000); do
      ls "$tmp"/ckpt/ckpt-*/MANIFEST >/dev/null 2>&1 && break
      sleep 0.01
    done
    ls "$tmp"/ckpt/ckpt-*/MANIFEST >/dev/null 2>&1 || fail "no checkpoint was written"
    pkill -KILL -P "$job" actorflow 2>/dev/null || true
    kill -KILL "$job" 2>/dev/null
    wait "$job" 2>/dev/null
    grep -q "finished" "$tmp/out1" && fail "the job finished before it was killed: make it longer"
    killed_lines=$(cat "$tmp"/ids-*.txt | wc -l)
    run_limited 120 run "$tmp/ckpt.pbtxt" --no-progress --resume; expect_rc 0
    expect_err "resuming from $tmp/ckpt/ckpt-[0-9]\{20\} (step [0-9]\+)"
    expect_out "resumed from $tmp/ckpt/ckpt-"
    expect_out "training: [0-9]\+ steps, 600000 samples"
    expect_out "checkpoints written: [0-9]\+"
    # Each trainer cut its list at the checkpoint (what it trained after
    # the checkpoint was lost with the killed process and came again).
    for r in 0 1; do
      expect_err "train\[$r\]: record ids: $tmp/ids-$r.txt keeps the [0-9]\+ records of steps up to [0-9]\+ (the checkpoint's)"
    done
    echo "the killed run had listed $killed_lines records; on resume:"
    grep -o 'train\[[01]\]: record ids: .*' "$tmp/err"
    # samples/s counts this run's samples only: 600000 less those the
    # trainers had trained at the checkpoint (the records their lists kept).
    kept=$(sed -n 's/.*train\[[01]\]: record ids: .* keeps the \([0-9]\+\) records .*/\1/p' "$tmp/err" \
      | awk '{ s += $1 } END { print s + 0 }')
    since=$(sed -n 's/.*; samples\/s counts the \([0-9]\+\) samples trained since$/\1/p' "$tmp/out")
    [ "$since" = $((600000 - kept)) ] \
      || fail "the resumed summary counts '$since' samples trained since the resume, not 600000 - $kept"
    rate=$(sed -n 's/^  training: [0-9]* steps, 600000 samples, \([0-9]*\) samples\/s.*/\1/p' "$tmp/out")
    secs=$(sed -n "s/^job '.*' finished after \([0-9.]*\) s$/\1/p" "$tmp/out")
    awk -v r="$rate" -v n="$since" -v s="$secs" \
      'BEGIN { exit !(r > 0 && s > 0 && r * s >= 0.95 * n && r * s <= 1.05 * n) }' \
      || fail "samples/s $rate over $secs s is not the $since samples trained since the resume"
    echo "resumed: $since samples in $secs s, $rate samples/s"
    check_ids "killed and resumed"
    resumed_auc=$(auc_of "$tmp/out")
    awk -v a="$plain_auc" -v b="$resumed_auc" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0.8 && d <= 0.01) }' \
      || fail "AUC after resume $resumed_auc, uninterrupted $plain_auc: not within 0.01"
    echo "uninterrupted AUC $plain_auc, killed and resumed $resumed_auc"
    ;;
  train_progress)
    # Without a terminal, training progress comes as log lines: the CLI's
    # (every --log-every seconds) and each trainer's (every log_every_steps).
    # Interrupted after 3.5 s; killed (137) if the drain takes over 30 s.
    timeout --preserve-status -k 30 -s INT 3.5 "$bin" run "$data/train_progress.pbtxt" \
      --log-every 1 >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    expect_rc 130
    expect_out "job 'train-progress' stopped early"
    expect_out "^  training: [0-9]\+ steps"
    pattern='progress: epoch [0-9]\+ | step [0-9]\+ | loss [0-9]\+\.[0-9]\{4\} | [0-9.]\+\( k\| M\)\? samples/s\( | [0-9]\+% | ETA [0-9hms ]\+\)\?, [0-9.]\+ s$'
    [ "$(grep -c -- "$pattern" "$tmp/err")" -ge 2 ] || fail "expected 2 or more training progress lines"
    # The step count grows from one progress line to the next.
    sed -n 's/.*progress: epoch [0-9]* | step \([0-9]*\) |.*/\1/p' "$tmp/err" \
      | awk 'NR > 1 && $1 <= prev { bad = 1 } { prev = $1 } END { exit bad }' \
      || fail "progress steps do not grow"
    for r in 0 1; do
      [ "$(grep -c -- "train\[$r\]: epoch [0-9]\+ step [0-9]\+ loss [0-9.]\+ [0-9]\+ samples/s" "$tmp/err")" -ge 2 ] \
        || fail "expected log lines from trainer $r"
    done
    # log_every_steps: 100, so only multiples of 100.
    grep -o 'train\[[01]\]: epoch [0-9]* step [0-9]*' "$tmp/err" | awk '$NF % 100 != 0 { exit 1 }' \
      || fail "trainer logged a step that is not a multiple of log_every_steps"
    ;;
  metrics_port)
    # --metrics-port: curl scrapes the Prometheus text while the job runs;
    # a second job cannot take the same port.
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$bin" run "$data/train_progress.pbtxt" --metrics-port "$port" --no-progress \
      >"$tmp/out" 2>"$tmp/err" </dev/null &
    pid=$!
    url=http://127.0.0.1:$port/metrics
    for ((i = 0; i < 100; ++i)); do
      curl -s "$url" 2>/dev/null | grep -q '^actorflow_step [1-9]' && break
      sleep 0.1
    done
    curl -s -D "$tmp/headers" "$url" >"$tmp/scrape1" || { kill -INT $pid; fail "curl could not scrape $url"; }
    sleep 1.5
    curl -s "$url" >"$tmp/scrape2" || { kill -INT $pid; fail "the second scrape failed"; }
    timeout -k 5 20 "$bin" run "$data/train_progress.pbtxt" --metrics-port "$port" --no-progress \
      >"$tmp/out2" 2>"$tmp/err2" </dev/null
    rc2=$?
    kill -INT $pid
    wait $pid
    rc=$?
    expect_rc 130
    [ "$rc2" -eq 2 ] || fail "a second job on port $port: exit $rc2, expected 2"
    grep -q "cannot listen on 127.0.0.1:$port" "$tmp/err2" || { cat "$tmp/err2"; fail "no error naming the address"; }
    grep -qi '^Content-Type: text/plain' "$tmp/headers" || { cat "$tmp/headers"; fail "not the Prometheus text format"; }
    for f in scrape1 scrape2; do
      for m in '^# TYPE actorflow_step gauge$' '^actorflow_loss{stage="train"} [0-9.e+-]\+$' \
               '^actorflow_stage_busy{stage="train"} [0-9.e+-]\+$' \
               '^actorflow_stage_items_per_s{stage="reader"} [0-9.e+-]\+$' \
               '^actorflow_stage_replicas{stage="train"} 2$' '^actorflow_job_network_bytes 0$' \
               '^actorflow_job_coordinator_bytes 0$'; do
        grep -q -- "$m" "$tmp/$f" || { cat "$tmp/$f"; fail "$f lacks $m"; }
      done
    done
    # Each trainer replica's utilization under its own name, with a
    # replica label: summing actorflow_stage_busy over stages must not
    # count the trainers twice (a stage="train[0]" series once did).
    for r in 0 1; do
      for g in busy param_wait input_wait; do
        grep -q "^actorflow_replica_$g{stage=\"train\",replica=\"$r\"} [0-9.e+-]\+\$" "$tmp/scrape2" \
          || { cat "$tmp/scrape2"; fail "scrape2 lacks actorflow_replica_$g of train replica $r"; }
      done
    done
    ! grep -q 'stage="[^"]*\[' "$tmp/scrape1" "$tmp/scrape2" \
      || { grep 'stage="[^"]*\[' "$tmp/scrape1" "$tmp/scrape2"; fail "a replica's figure under a stage label"; }
    [ "$(grep -c '^actorflow_stage_busy{' "$tmp/scrape2")" -eq "$(grep -c '^actorflow_stage_replicas{' "$tmp/scrape2")" ] \
      || { grep '^actorflow_stage_busy{\|^actorflow_stage_replicas{' "$tmp/scrape2"; fail "actorflow_stage_busy is not one series per stage"; }
    s1=$(sed -n 's/^actorflow_step //p' "$tmp/scrape1")
    s2=$(sed -n 's/^actorflow_step //p' "$tmp/scrape2")
    awk -v a="$s1" -v b="$s2" 'BEGIN { exit !(b > a && a > 0) }' \
      || fail "actorflow_step did not grow between scrapes: $s1 then $s2"
    echo "scraped at steps $s1 and $s2"
    ;;
  train_eta)
    # The job's size is known once the cache's first pass is done (2048
    # records x 1000 epochs): progress lines then show the share done and an
    # ETA. The share matches the steps (batches of exactly 32), grows, and
    # the job ends about when the first ETA said.
    "$bin" run "$data/train_eta.pbtxt" --log-every 1 >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    expect_rc 0
    expect_out "^  training: 64000 steps, 2048000 samples"
    grep 'progress: .* ETA ' "$tmp/err" >"$tmp/eta" || true
    [ "$(wc -l <"$tmp/eta")" -ge 2 ] || { cat "$tmp/err"; fail "expected 2 or more progress lines with an ETA"; }
    total=$(sed -n "s/^job 'train-eta' finished after \([0-9.]*\) s$/\1/p" "$tmp/out")
    sed 's/.*| step \([0-9]*\) | .* | \([0-9]*\)% | ETA \([0-9hms ]*\), \([0-9.]*\) s$/\1 \2 \3 \4/' "$tmp/eta" \
      | awk -v total="$total" '
          function secs(s,  t) { t = 0
            if (match(s, /[0-9]+h/)) t += 3600 * substr(s, RSTART, RLENGTH - 1)
            if (match(s, /[0-9]+m/)) t += 60 * substr(s, RSTART, RLENGTH - 1)
            if (match(s, /[0-9]+ ?s/)) t += substr(s, RSTART, RLENGTH) + 0
            return t }
          { pct = 100 * $1 * 32 / 2048000
            if ($2 < pct - 1.5 || $2 > pct + 1.5) { print "share " $2 "% at step " $1 " (expected " pct ")"; bad = 1 }
            if (NR > 1 && $2 < prev) { print "share fell"; bad = 1 }
            prev = $2
            if (NR == 1) { eta = $3; for (i = 4; i < NF; ++i) eta = eta " " $i; first = $NF + secs(eta) } }
          END { if (first < total / 2 || first > total * 2) { print "first ETA ends at " first " s, the job took " total " s"; bad = 1 }
                exit bad }' \
      || { cat "$tmp/eta"; fail "progress share or ETA off"; }
    ;;
  train_validate)
    run validate "$data/train_invalid.pbtxt"; expect_rc 2
    [ ! -s "$tmp/out" ] || fail "validate printed to stdout"
    [ "$(wc -l <"$tmp/err")" -eq 4 ] || fail "expected 4 problems"
    expect_err_line train_invalid.pbtxt 'type: "dens"' \
      'training.model: layer 2 (dens): unknown layer type'
    expect_err_line train_invalid.pbtxt 'type: "adamw"' \
      'training.optimizer: unknown optimizer "adamw"'
    expect_err_line train_invalid.pbtxt 'staleness: -1' \
      'training.ps.staleness must be >= 0'
    expect_err_line train_invalid.pbtxt 'device: "tpu"' \
      "stage 'train' (trainer): device must be \"cpu\", \"cuda\" or \"cuda:N\", got \"tpu\""
    run validate "$data/train_invalid_units.pbtxt"; expect_rc 2
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "expected 1 problem"
    expect_err_line train_invalid_units.pbtxt 'units: 0' \
      'training.model: layer 2 (dense): units must be > 0 (got 0)'
    run validate "$data/train_no_training.pbtxt"; expect_rc 2
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "expected 1 problem"
    expect_err_line train_no_training.pbtxt 'name: "train"' \
      "stage 'train' needs a training { model { ... } } section"
    # run refuses the same files before starting anything.
    run_limited 30 run "$data/train_invalid.pbtxt"; expect_rc 2
    expect_err 'unknown optimizer "adamw"'
    ;;
  train_bad_data)
    # Labels 0..19 into a 10-class model, on both trainer replicas.
    run_limited 30 run "$data/train_bad_labels.pbtxt"; expect_rc 1
    expect_out "job 'train-bad-labels' failed"
    expect_err "^actorflow: stage train\[[01]\] failed: .*label 1[0-9] of record [0-9]\+ (epoch 0) is outside the model's classes \[0, 10)$"
    [ "$(grep -c '^actorflow: ' "$tmp/err")" -eq 1 ] || fail "expected one error line"
    # 16-byte records into a model whose input_shape is [32].
    run_limited 30 run "$data/train_bad_shape.pbtxt"; expect_rc 1
    expect_out "job 'train-bad-shape' failed"
    expect_err "^actorflow: stage train\[0\] failed: .*field 'x' has 16 values per record (shape \[16\]), the model's input_shape \[32\] needs 32$"
    ! grep -q 'AddressSanitizer\|LeakSanitizer\|terminate called' "$tmp/err" || fail "crashed"
    ;;
  train_lost_trainer)
    # Trainer replica 1 fails at step 5 under a staleness bound of 1: the
    # other replica must not wait for it forever.
    run_limited 60 run "$data/train_lost_trainer.pbtxt"; expect_rc 0
    expect_out "job 'train-lost-trainer' finished"
    expect_out "^  replica lost, job went on: train\[1\]: fault injection: trainer fails at step 5; [0-9]\+ items it had not finished went to the other replicas$"
    [ "$(grep -c 'replica lost' "$tmp/out")" -eq 1 ] || fail "expected one lost replica"
    expect_out "^  training: [0-9]\+ steps"
    # 125 batches: the survivor trains on all but those train[1] finished
    # (its unfinished ones are sent to train[0]).
    steps=$(sed -n 's/.* train\[0\]: \([0-9]*\) steps, .*/\1/p' "$tmp/err")
    [ -n "$steps" ] && [ "$steps" -gt 100 ] || fail "the surviving trainer ran only '$steps' steps"
    ;;
  generate)
    # A Criteo-like click log from a planted model (docs/generate.md).
    g=(generate criteo --rows 20000 --test-rows 5000)
    run "${g[@]}" --out "$tmp/g1" --seed 7; expect_rc 0
    expect_out "train.csv: 20000 rows, click rate 0\.[0-9]*, planted AUC 0\.[0-9]*$"
    expect_out "test.csv: 5000 rows"
    expect_out "planted.json"
    # Same arguments, same bytes; another seed, other rows. Row i depends
    # on the seed and i only: fewer rows are a prefix.
    run "${g[@]}" --out "$tmp/g2" --seed 7; expect_rc 0
    for f in train.csv test.csv planted.json; do
      cmp -s "$tmp/g1/$f" "$tmp/g2/$f" || fail "two runs with --seed 7 give different $f"
    done
    run generate criteo --rows 2000 --test-rows 500 --out "$tmp/g3" --seed 7; expect_rc 0
    head -n 2001 "$tmp/g1/train.csv" | cmp -s - "$tmp/g3/train.csv" \
      || fail "--rows 2000 is not the first 2000 rows of --rows 20000"
    run generate criteo --rows 2000 --test-rows 500 --out "$tmp/g3" --seed 8; expect_rc 0
    head -n 2001 "$tmp/g1/train.csv" | cmp -s - "$tmp/g3/train.csv" \
      && fail "--seed 7 and --seed 8 give the same train.csv"
    head -n 501 "$tmp/g1/test.csv" | cmp -s - "$tmp/g3/test.csv" \
      && fail "--seed 7 and --seed 8 give the same test.csv"
    python3 - "$tmp/g1" "$tmp/g3" <<'PY' || fail "the generated files are not as documented"
import csv, json, math, re, sys
d, other = sys.argv[1], sys.argv[2]
p = json.load(open(d + "/planted.json"))
header = ["label"] + ["I%d" % k for k in range(1, 14)] \
         + ["C%d" % j for j in range(1, 27)] + ["planted_logit"]
def load(path):
    rows = list(csv.reader(open(path, newline="")))
    assert rows[0] == header, "header %s" % rows[0]
    assert all(len(r) == 41 for r in rows[1:]), "a row without 41 cells"
    return rows[1:]
train, test = load(d + "/train.csv"), load(d + "/test.csv")
assert len(train) == 20000 and len(test) == 5000, (len(train), len(test))
for key in ("seed", "rows", "test_rows", "bias", "click_rate", "click_rate_test"):
    assert key in p, key
assert (p["seed"], p["rows"], p["test_rows"]) == (7, 20000, 5000)
for key, n in (("numeric_mean", 13), ("numeric_std", 13),
               ("numeric_missing_rates", 13), ("vocabulary_sizes", 26),
               ("categorical_missing_rates", 26)):
    assert len(p[key]) == n, key
vocab = p["vocabulary_sizes"]
assert min(vocab) == 4 and max(vocab) == 200000, vocab
count = re.compile(r"^[0-9]+$")
hexid = re.compile(r"^[0-9a-f]{8}$")
n = len(train)
for r in train + test:
    assert r[0] in ("0", "1"), r[0]
    assert all(c == "" or count.match(c) for c in r[1:14]), r[1:14]
    assert all(c == "" or hexid.match(c) for c in r[14:40]), r[14:40]
    float(r[40])
# Each column's share of empty cells is its configured missing rate
# (5 standard errors); log1p of the counts (empty as 0) has the mean and
# std planted.json gives.
rates = p["numeric_missing_rates"] + p["categorical_missing_rates"]
for c, rate in enumerate(rates):
    empty = sum(1 for r in train if r[1 + c] == "") / n
    tol = 5 * math.sqrt(rate * (1 - rate) / n) + 1e-9
    assert abs(empty - rate) <= tol, (header[1 + c], empty, rate)
for k in range(13):
    v = [math.log1p(int(r[1 + k])) if r[1 + k] else 0.0 for r in train]
    mean = sum(v) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / n)
    m, s = p["numeric_mean"][k], p["numeric_std"][k]
    assert abs(mean - m) <= 5 * s / math.sqrt(n), ("I%d mean" % (k + 1), mean, m)
    assert abs(std - s) <= 0.05 * s, ("I%d std" % (k + 1), std, s)
for j in range(26):
    assert len({r[14 + j] for r in train} - {""}) <= vocab[j], "C%d" % (j + 1)
clicks = sum(int(r[0]) for r in train) / n
assert 0.15 <= clicks <= 0.35 and abs(clicks - p["click_rate"]) < 1e-12, clicks
# The planted AUC, recomputed: positives' rank sum, ties at their mean rank.
def auc(rows):
    s = sorted((float(r[40]), int(r[0])) for r in rows)
    pos = rank_sum = 0.0
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j][0] == s[i][0]:
            j += 1
        k = sum(label for _, label in s[i:j])
        rank_sum += k * (i + 1 + j) / 2
        pos += k
        i = j
    neg = len(s) - pos
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)
for rows, key in ((train, "planted_auc_train"), (test, "planted_auc_test")):
    assert abs(auc(rows) - p[key]) < 1e-6, (key, auc(rows), p[key])
    assert 0.7 < p[key] < 0.9, (key, p[key])
# A value index prints the same string whatever the seed: C9's most
# frequent value (rank 0 of 4) is the same string in both.
def top(rows, c):
    cells = [r[c] for r in rows if r[c]]
    return max(set(cells), key=cells.count)
other_train = load(other + "/train.csv")
assert top(train, 22) == top(other_train, 22), "C9"
PY
    # --missing-rate 0: no empty cell; --test-rows 0: a header, no AUC.
    run generate criteo --out "$tmp/g4" --rows 500 --test-rows 0 --missing-rate 0
    expect_rc 0; expect_out "test.csv: 0 rows"
    [ "$(wc -l <"$tmp/g4/train.csv")" -eq 501 ] || fail "train.csv does not have 500 rows"
    [ "$(wc -l <"$tmp/g4/test.csv")" -eq 1 ] || fail "test.csv has more than its header"
    grep -q ',,\|,$' "$tmp/g4/train.csv" && fail "--missing-rate 0 left empty cells"
    python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["planted_auc_test"] is None' \
      "$tmp/g4/planted.json" || fail "planted_auc_test of no rows is not null"
    # Bad arguments: exit code 2, one line naming the problem.
    run generate criteo --out "$tmp/g5" --rows 0; expect_rc 2
    expect_err "^actorflow: --rows must be at least 1, got 0$"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "more than one error line"
    [ ! -e "$tmp/g5" ] || fail "--rows 0 created the output folder"
    run generate criteo --out "$tmp/g5" --missing-rate 1.5; expect_rc 2
    expect_err "^actorflow: --missing-rate must be in \[0, 1)"
    : >"$tmp/afile"
    run generate criteo --out "$tmp/afile/sub" --rows 10; expect_rc 2
    expect_err "^actorflow: $tmp/afile/sub: cannot create the folder: "
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "more than one error line"
    mkdir "$tmp/g6" "$tmp/g6/train.csv"
    run generate criteo --out "$tmp/g6" --rows 10; expect_rc 2
    expect_err "^actorflow: $tmp/g6/train.csv: cannot write: "
    run generate criteo --rows 10; expect_rc 2; expect_err "out is required"
    run generate criteo --help; expect_rc 0
    expect_out "--weight-scale"; expect_out "planted_auc_test"; expect_out "log1p"
    ;;
  *)
    echo "unknown case $case_name"; exit 2 ;;
esac
echo "PASS: $case_name"
