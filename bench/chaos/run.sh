#!/usr/bin/env bash
# A chaos run (issue 18, docs/multi-host.md "Chaos runs"): the CTR example
# and the Fashion-MNIST MLP over 4 `actorflow node` processes, with
# checkpoints, while nodes are killed and started again, frozen and
# thawed, and (as root, in network namespaces) cut off and reconnected, at
# random moments from a printed seed.
#
#   bench/chaos/run.sh [MINUTES [SEED]]      default: 10 minutes, a new seed
#   AF_BIN=...  the actorflow binary (default build/release/bin/actorflow)
#   CHAOS_SIZE=small  shorter jobs, fewer faults (the test tier's
#                     chaos.short); default: the examples' sizes (CTR: 1M
#                     records x 5 epochs; Fashion-MNIST: 60,000 x 10)
#
# First one fault-free run of each job (its accuracy or AUC and wall
# time), then the jobs in turn until MINUTES have passed (at least one
# run of each), each with faults injected one at a time every 1-4 s (small:
# 3-8 s) while it runs: a random node
# gets SIGKILL (a new node starts at its address 0.5-3 s later), SIGSTOP
# (SIGCONT 1-5 s later), or its link cut (restored 1-5 s later). Every
# job must finish (exit 0); by the trainers' record ids each record is
# trained exactly once per epoch; the final accuracy within 1 point (AUC
# within 0.01) of the fault-free run's. Prints a table and exits 1 if any
# target is missed, keeping the logs of the runs that missed one (and
# every node's log) in CHAOS_LOGS (default build/chaos-logs). Every process
# it starts, it stops (and the namespaces and links it made, it removes).
set -u
minutes=${1:-10}
seed=${2:-$((RANDOM * 32768 + RANDOM))}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${AF_BIN:-$root/build/release/bin/actorflow}
here=$root/tests/apps
data=$here/data
size=${CHAOS_SIZE:-full}
[ -x "$bin" ] || { echo "chaos: no $bin (cmake --build build/release --target actorflow)"; exit 2; }
[[ $minutes =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "usage: bench/chaos/run.sh [MINUTES [SEED]]"; exit 2; }
images=$(dpkg -L dataset-fashion-mnist 2>/dev/null | grep 'train-images-idx3' | head -1)
[ -n "$images" ] || { echo "chaos: needs Debian's dataset-fashion-mnist"; exit 2; }

tmp=$(mktemp -d)
# The logs of runs that missed a target, and every node's log at the end.
keep=${CHAOS_LOGS:-$root/build/chaos-logs}
rm -rf "$keep" && mkdir -p "$keep"
# Nodes live as long as the whole run (nodes.sh's watchdog: 170 s).
NODE_WATCHDOG_S=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 + 1800 }')
# shellcheck source=../../tests/apps/nodes.sh
source "$here/nodes.sh"
# shellcheck source=../../tests/apps/netns.sh
source "$here/netns.sh"
job=
cleanup() {
  trap - EXIT INT TERM HUP
  local n
  cp "$tmp"/node-*.err "$keep"/ 2>/dev/null
  [ -n "$job" ] && alive "$job" && kill -TERM "$job"
  for n in "${nodes[@]}"; do kill -CONT "${node_pid[$n]}" 2>/dev/null; done
  stop_nodes 5 >/dev/null
  [ -n "$job" ] && wait "$job" 2>/dev/null
  remove_netns
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

RANDOM=$seed
# rnd LO HI: a number in [LO, HI] with one decimal, from the seeded RANDOM.
rnd() { awk -v lo="$1" -v hi="$2" -v r="$RANDOM" 'BEGIN { printf "%.1f", lo + (hi - lo) * r / 32767 }'; }
log() { echo "[$(date +%T)] $*"; }

# --- the nodes ---------------------------------------------------------------
netns=0
if netns_usable; then netns=1; fi
declare -A addr ns_of cur   # w1..w4 -> HOST:PORT, its namespace, its current node name
start_all() {
  local k name
  if [ $netns -eq 1 ]; then
    pick_subnet; make_bridge
    for k in 1 2 3 4; do
      name=w$k
      netns_node "$name" $((k + 1))
      addr[$name]=10.213.$net.$((k + 1)):${port[$name]}
      ns_of[$name]=afns-$$-$name
      cur[$name]=$name
    done
  else
    for k in 1 2 3 4; do
      name=w$k
      start_node "$name"
      addr[$name]=127.0.0.1:${port[$name]}
      cur[$name]=$name
    done
  fi
}
# restart_node W: a new node at W's address (in its namespace).
restarts_of=0
restart_node() {
  local w=$1 name
  restarts_of=$((restarts_of + 1))
  name=$w-r$restarts_of
  [ $netns -eq 1 ] && node_exec=(ip netns exec "${ns_of[$w]}")
  start_node "$name" "${addr[$w]}"
  node_exec=()
  cur[$w]=$name
}

# --- the jobs ----------------------------------------------------------------
# make_topology JOB: $tmp/JOB.pbtxt from the example, placed over w1..w4
# (every stage on all four, in an order rotated per stage; the shards
# too), with checkpoints and the trainers' record ids.
if [ "$size" = small ]; then
  ctr_records=1000000 ctr_epochs=2 fm_epochs=3 fm_split=train fault_gap="3 8"
else
  ctr_records=1000000 ctr_epochs=5 fm_epochs=10 fm_split=train fault_gap="1 4"
fi
make_topology() {
  local job=$1 src
  src=$root/apps/examples/ctr_embedding.pbtxt
  [ "$job" = fmnist ] && src=$root/apps/examples/fmnist_mlp.pbtxt
  python3 - "$src" "$tmp/$job.pbtxt" "$job" "$tmp" "${addr[w1]}" "${addr[w2]}" \
    "${addr[w3]}" "${addr[w4]}" "$ctr_records" "$ctr_epochs" "$fm_epochs" <<'PY' || exit 2
import re, sys
src, dst, job, tmp, *rest = sys.argv[1:]
addrs, (records, ctr_epochs, fm_epochs) = rest[:4], rest[4:]
text = open(src).read()
text = re.sub(r"(?m)^\s*#.*\n", "", text)
text = re.sub(r"checkpoint \{[^}]*\}\n", "", text)
hosts = "".join(f'host {{ name: "w{k + 1}" address: "{a}" }}\n' for k, a in enumerate(addrs))
text = re.sub(r'(?m)^(name: .*\n)', lambda m: m.group(1) + hosts, text, count=1)
n = [0]
def place(m):
    name = m.group(2)
    if name.startswith("test") or name == "evaluate":
        return m.group(0)   # the evaluator's branch stays in the coordinator
    k = n[0]; n[0] += 1
    order = ", ".join(f'"w{(k + i) % 4 + 1}"' for i in range(4))
    return m.group(0) + f"  hosts: [{order}]\n"
text = re.sub(r'(?m)^(stage \{\n  name: "([^"]+)"\n)', place, text)
text = re.sub(r"ps \{ shards: 2", 'ps { shards: 2 hosts: ["w3", "w4", "w1", "w2"]', text)
text = re.sub(r"trainer \{", f'trainer {{ record_ids: "{tmp}/ids-{job}-{{replica}}.txt"', text)
if job == "ctr":
    text = re.sub(r"records: 1000000", f"records: {records}", text)
    text = re.sub(r"epochs: 5", f"epochs: {ctr_epochs}", text)
    text += f'checkpoint {{ dir: "{tmp}/ckpt-{job}" every_steps: 400 keep: 2 }}\n'
else:
    text = text.replace("build/data/fmnist", f"{tmp}/fmnist")
    text = re.sub(r"cache \{ epochs: 10 \}", f"cache {{ epochs: {fm_epochs} }}", text)
    text += f'checkpoint {{ dir: "{tmp}/ckpt-{job}" every_steps: 1000 keep: 2 }}\n'
assert "hosts:" in text and "record_ids" in text and "checkpoint {" in text
open(dst, "w").write(text)
PY
}
# The Fashion-MNIST JPEG shards, as scripts/demo makes them.
convert_fmnist() {
  local tr=$images te
  te=$(dpkg -L dataset-fashion-mnist | grep 't10k-images-idx3' | head -1)
  [ "$fm_split" = t10k ] && tr=$te
  mkdir -p "$tmp/fmnist"
  "$bin" convert idx --images "$tr" --labels "${tr/images-idx3/labels-idx1}" \
    --out "$tmp/fmnist/train" --shards 4 --format jpeg --quality 90 >/dev/null 2>&1 \
    && "$bin" convert idx --images "$te" --labels "${te/images-idx3/labels-idx1}" \
      --out "$tmp/fmnist/test" --shards 1 --format jpeg --quality 90 >/dev/null 2>&1 \
    || { echo "chaos: converting Fashion-MNIST failed"; exit 2; }
}

# metric_of OUT: "accuracy A" or "AUC A" from a summary.
metric_of() {
  sed -n 's/^  test (step [0-9]*): loss [0-9.]*, \(accuracy [0-9.]*\|AUC [0-9.]*\).*/\1/p' "$1" | tail -n 1
}
# ids_of JOB: the trainers' record ids against the job's input, by epoch;
# prints "LOST DUPLICATED" (pairs of epoch and record).
ids_of() {
  local job=$1 out
  rm -f "$tmp/ids.out"
  if [ "$job" = ctr ]; then
    python3 "$here/record_ids.py" exactly-once --by-epoch --epochs "$ctr_epochs" \
      --records "$ctr_records" "$tmp"/ids-ctr-*.txt >"$tmp/ids.out" 2>&1
  else
    python3 "$here/record_ids.py" exactly-once --by-epoch --epochs "$fm_epochs" \
      --tfrecords "$tmp/fmnist/train-*.tfrecord" "$tmp"/ids-fmnist-*.txt >"$tmp/ids.out" 2>&1
  fi
  out=$(sed -n 's/^by id: \([0-9]*\) (epoch, record) pairs lost, \([0-9]*\) duplicated$/\1 \2/p' "$tmp/ids.out")
  echo "${out:-? ?}"
}

# --- faults ------------------------------------------------------------------
declare -A f_kill f_stop f_cut
inject() {
  local w kind d n
  w=w$((RANDOM % 4 + 1))
  n=${cur[$w]}
  kind=$((RANDOM % (netns ? 3 : 2)))
  case $kind in
    0)
      d=$(rnd 0.5 3)
      log "fault: SIGKILL $w (${addr[$w]}), a new node there in $d s"
      kill -KILL "${node_pid[$n]}" 2>/dev/null
      wait "${watcher[$n]}" 2>/dev/null
      sleep "$d"
      restart_node "$w"
      f_kill[$cur_job]=$((${f_kill[$cur_job]:-0} + 1))
      ;;
    1)
      d=$(rnd 1 5)
      log "fault: SIGSTOP $w for $d s"
      kill -STOP "${node_pid[$n]}"
      sleep "$d"
      kill -CONT "${node_pid[$n]}"
      f_stop[$cur_job]=$((${f_stop[$cur_job]:-0} + 1))
      ;;
    2)
      d=$(rnd 1 5)
      log "fault: link of $w cut for $d s"
      ip link set "${veth[$w]}" down
      sleep "$d"
      ip link set "${veth[$w]}" up
      f_cut[$cur_job]=$((${f_cut[$cur_job]:-0} + 1))
      ;;
  esac
}

# run_job JOB FAULTS: runs the job (in the background while faults are
# injected, when FAULTS is 1); sets rc, took, and the summary in $tmp/out.
run_job() {
  local name=$1 faults=$2 t0
  rm -rf "$tmp/ckpt-$name" "$tmp"/ids-"$name"-*.txt
  t0=$(date +%s.%N)
  timeout -k 5 900 "$bin" run "$tmp/$name.pbtxt" --no-progress --max-restarts 1000 \
    >"$tmp/out" 2>"$tmp/err" </dev/null &
  job_pid=$!
  job=$job_pid
  run_faults=0
  if [ "$faults" -eq 1 ]; then
    local next i
    while alive $job_pid; do
      # The next fault a gap from now, unless the job ends first.
      next=$(rnd $fault_gap)
      for ((i = 0; i < ${next/./}; ++i)); do
        alive $job_pid || break
        sleep 0.1
      done
      alive $job_pid || break
      inject
      run_faults=$((run_faults + 1))
    done
  fi
  wait $job_pid; rc=$?
  job=
  took=$(since "$t0")
}

# --- the run -------------------------------------------------------------------
log "chaos: seed $seed, $minutes minutes, 4 nodes $([ $netns -eq 1 ] && echo "in network namespaces (kill, stop, link cut)" || echo "on 127.0.0.1 (kill, stop; link cuts need root)"), size $size"
start_all
convert_fmnist
make_topology ctr
make_topology fmnist
declare -A clean_metric clean_took runs bad restarts_n lost dup worst took_sum survived
failed=0
for j in ctr fmnist; do
  run_job "$j" 0
  [ "$rc" -eq 0 ] || { log "the fault-free $j run failed (exit $rc)"; tail -n 20 "$tmp/err"; exit 1; }
  clean_metric[$j]=$(metric_of "$tmp/out")
  clean_took[$j]=$took
  log "fault-free $j: ${clean_metric[$j]}, $took s"
done
deadline=$(awk -v m="$minutes" -v t="$(date +%s)" 'BEGIN { printf "%d", t + m * 60 }')
round=0
while [ "$(date +%s)" -lt "$deadline" ] || [ $round -lt 2 ]; do
  # A node that exited on its own (not a fault of ours) is a failure.
  for w in w1 w2 w3 w4; do
    alive "${node_pid[${cur[$w]}]}" && continue
    log "node $w (${cur[$w]}) exited on its own: $(tail -n 3 "$tmp/node-${cur[$w]}.err" | tr '\n' ' ')"
    failed=1
    restart_node "$w"
  done
  cur_job=ctr
  [ $((round % 2)) -eq 1 ] && cur_job=fmnist
  round=$((round + 1))
  run_job "$cur_job" 1
  runs[$cur_job]=$((${runs[$cur_job]:-0} + 1))
  took_sum[$cur_job]=$(awk -v a="${took_sum[$cur_job]:-0}" -v b="$took" 'BEGIN { print a + b }')
  n=$(grep -c '^  restarted: ' "$tmp/out")
  restarts_n[$cur_job]=$((${restarts_n[$cur_job]:-0} + n))
  m=$(metric_of "$tmp/out")
  read -r l d <<<"$(ids_of "$cur_job")"
  lost[$cur_job]=$((${lost[$cur_job]:-0} + ${l/\?/0}))
  dup[$cur_job]=$((${dup[$cur_job]:-0} + ${d/\?/0}))
  ok=1
  [ "$rc" -eq 0 ] || ok=0
  [ "$l" = 0 ] && [ "$d" = 0 ] || ok=0
  gap=$(awk -v a="${m#* }" -v b="${clean_metric[$cur_job]#* }" -v k="${m%% *}" \
    'BEGIN { d = b - a; if (k == "accuracy") d *= 100; printf "%.4f", d }')
  awk -v g="$gap" -v k="${m%% *}" 'BEGIN { exit !((k == "accuracy" && g <= 1) || (k == "AUC" && g <= 0.01)) }' || ok=0
  worst[$cur_job]=$(awk -v a="${worst[$cur_job]:--1e9}" -v b="$gap" 'BEGIN { print (b > a ? b : a) }')
  log "$cur_job run $round: exit $rc, $took s, $n restarts, ${m:-no metric}, by id: $l lost, $d duplicated$([ $ok -eq 1 ] || echo "  <- MISSED")"
  [ $ok -eq 1 ] && survived[$cur_job]=$((${survived[$cur_job]:-0} + run_faults))
  if [ $ok -eq 0 ]; then
    bad[$cur_job]=$((${bad[$cur_job]:-0} + 1)); failed=1
    cp "$tmp/out" "$keep/run-$round.out"; cp "$tmp/err" "$keep/run-$round.err"
    cp "$tmp/ids.out" "$keep/run-$round.ids" 2>/dev/null
    grep '^  restarted: \|^job \|^  test ' "$tmp/out"; tail -n 15 "$tmp/err"; head -n 12 "$tmp/ids.out"
  fi
done

echo
echo "chaos run: seed $seed, $minutes min, size $size, $([ $netns -eq 1 ] && echo "network namespaces" || echo "loopback")"
printf "%-7s %5s %6s %6s %5s %9s %9s %8s %5s %10s %14s %17s %12s\n" job runs kills stops cuts survived finished restarts lost duplicated "metric (free)" "worst gap" "mean s (free)"
for j in ctr fmnist; do
  faults=$((${f_kill[$j]:-0} + ${f_stop[$j]:-0} + ${f_cut[$j]:-0}))
  printf "%-7s %5d %6d %6d %5d %9s %9s %8d %5d %10d %14s %17s %12s\n" "$j" "${runs[$j]:-0}" \
    "${f_kill[$j]:-0}" "${f_stop[$j]:-0}" "${f_cut[$j]:-0}" "${survived[$j]:-0}/$faults" \
    "$((${runs[$j]:-0} - ${bad[$j]:-0}))/${runs[$j]:-0}" "${restarts_n[$j]:-0}" \
    "${lost[$j]:-0}" "${dup[$j]:-0}" "${clean_metric[$j]#* }" \
    "${worst[$j]:-0}$([ "${clean_metric[$j]%% *}" = accuracy ] && echo " pts" || echo " AUC")" \
    "$(awk -v s="${took_sum[$j]:-0}" -v n="${runs[$j]:-1}" -v c="${clean_took[$j]}" 'BEGIN { printf "%.1f (%.1f)", s / n, c }')"
done
echo "survived: the faults of runs that met every target; targets: every job finishes, 0 lost, 0 duplicated, accuracy within 1 point, AUC within 0.01"
[ $failed -eq 0 ] && echo "PASS: chaos" || echo "FAIL: chaos (targets missed above; logs in $keep)"
exit $failed
