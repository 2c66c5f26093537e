# Sourced by bench/multi_process/*.sh: start `actorflow node` processes on
# 127.0.0.1 and stop exactly those. Needs `bin` (the actorflow binary) and
# `work` (a directory for their output) set, and the caller's EXIT trap
# to call stop_nodes.

node_pids=()
declare -A port

# start_node NAME [ARGS...]: a node on 127.0.0.1, any free port, with
# ARGS; sets port[NAME]. Its stdout and stderr go to $work/NAME.out and
# .err.
start_node() {
  local name=$1 line i
  shift
  "$bin" node --listen 127.0.0.1:0 "$@" >"$work/$name.out" 2>"$work/$name.err" </dev/null &
  node_pids+=($!)
  for ((i = 0; i < 300; ++i)); do
    line=$(grep -m1 '^actorflow node listening on ' "$work/$name.out" || true)
    [ -n "$line" ] && break
    kill -0 "${node_pids[-1]}" 2>/dev/null || { cat "$work/$name.err" >&2; echo "node $name exited" >&2; exit 1; }
    sleep 0.1
  done
  [[ $line =~ :([0-9]+)$ ]] || { echo "node $name did not listen" >&2; exit 1; }
  port[$name]=${BASH_REMATCH[1]}
}

# stop_nodes: SIGTERM to every node started, SIGKILL after 10 s, wait.
stop_nodes() {
  local p i any
  for p in "${node_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for ((i = 0; i < 100; ++i)); do
    any=0
    for p in "${node_pids[@]}"; do kill -0 "$p" 2>/dev/null && any=1; done
    [ $any -eq 0 ] && break
    sleep 0.1
  done
  for p in "${node_pids[@]}"; do
    kill -0 "$p" 2>/dev/null && { echo "node $p ignored SIGTERM: killing it" >&2; kill -KILL "$p" 2>/dev/null || true; }
  done
  for p in "${node_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  node_pids=()
}
