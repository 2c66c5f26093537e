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

fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$tmp/out"; echo "--- stderr"; cat "$tmp/err"; exit 1; }
run() { "$bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?; }
expect_rc() { [ "$rc" -eq "$1" ] || fail "expected exit code $1, got $rc"; }
expect_out() { grep -q -- "$1" "$tmp/out" || fail "stdout lacks '$1'"; }
expect_err() { grep -q -- "$1" "$tmp/err" || fail "stderr lacks '$1'"; }

case $case_name in
  help)
    run --help; expect_rc 0; expect_out "run"; expect_out "validate"
    run run --help; expect_rc 0; expect_out "--threads"
    run validate --help; expect_rc 0; expect_out "--list-types"
    ;;
  version)
    run --version; expect_rc 0; expect_out "^actorflow [0-9]\+\.[0-9]\+\.[0-9]\+$"
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
    if [ -z "$fm" ]; then echo "SKIP: dataset-fashion-mnist not installed"; exit 0; fi
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
    # With on_corrupt: skip, the job goes on and reports what it skipped.
    printf 'stage { name: "r" type: "tfrecord_source" tfrecord_source { files: "%s" on_corrupt: "skip" } }\nstage { name: "s" type: "sink" input { stage: "r" } }\n' "$tmp/bad.tfrecord" > "$tmp/skip.pbtxt"
    run run "$tmp/skip.pbtxt" --no-progress; expect_rc 0
    expect_out "delivered: 3332 records"
    expect_err "1 corrupt records skipped in all"
    printf 'a,b,c\n1,x,0.5\n2,"y, z",1.5\n' > "$tmp/t.csv"
    run convert csv "$tmp/t.csv" --column a:int64 --column b:string --column c:float --out "$tmp/csv"
    expect_rc 0; expect_out "wrote 2 records to 1 files"
    run inspect "$tmp/csv-00000-of-00001.tfrecord" --json --show all
    expect_rc 0; expect_out '"c": {"float_list": \[1.5\]}'
    printf 'a,b,c\n1,x,0.5\nnope,y,1\n' > "$tmp/bad.csv"
    run convert csv "$tmp/bad.csv" --column a:int64 --out "$tmp/bad"
    expect_rc 1; expect_err "bad.csv:3: column 'a': 'nope' is not an int64"
    mkdir -p "$tmp/imgs/cls"; cp "$here/../fuzz/corpus/image/"*.jpg "$tmp/imgs/cls/"
    echo "not an image" > "$tmp/imgs/cls/readme.txt"
    run convert images "$tmp/imgs" --out "$tmp/imgs-out"
    expect_rc 0; expect_out "skipped 1 files that are not JPEG images"
    ;;
  autotune)
    run run "$data/autotune.pbtxt"; expect_rc 0
    expect_err "autotune: measuring the pipeline"
    expect_out "autotune: decode replicas 1 -> 2"
    ;;
  terminal)
    # On a terminal the progress display is one line rewritten in place.
    command -v script >/dev/null || { echo "SKIP: script(1) not installed"; exit 0; }
    script -qec "timeout --preserve-status -s INT 2 '$bin' run '$data/long.pbtxt'" "$tmp/typescript" >"$tmp/out" 2>&1 </dev/null
    rc=$?
    expect_rc 130
    expect_out "job 'long' stopped early"
    # The live line: carriage return, erase-line, counters.
    grep -q $'\r\033\[K.*records/s' "$tmp/typescript" || fail "no live progress line"
    [ "$(grep -c 'progress: ' "$tmp/typescript")" -eq 0 ] || fail "log lines on a terminal"
    ;;
  *)
    echo "unknown case $case_name"; exit 2 ;;
esac
echo "PASS: $case_name"
