# Network namespaces for the multi-process tests and bench/chaos/run.sh
# (root only): a bridge afbPID in the root namespace with 10.213.N.1/24,
# and nodes in namespaces afns-PID-NAME joined to it by veth pairs, so
# that a test can cut one node's link (its root-side veth set down). The
# sourcing script has sourced nodes.sh (start_node, fail) and removes what
# was made with remove_netns in its EXIT trap.

made_ns=()     # namespaces made here
made_links=()  # root-side veths made here (deleting one deletes its pair)

# remove_netns: deletes the veth pairs and the bridge, then the
# namespaces made here; prints "left behind: ..." and returns 1 when any
# of them is still there.
remove_netns() {
  local ns link left=
  for link in "${made_links[@]}"; do ip link del "$link" 2>/dev/null; done
  for ns in "${made_ns[@]}"; do ip netns del "$ns" 2>/dev/null; done
  for link in "${made_links[@]}"; do
    ip link show "$link" >/dev/null 2>&1 && left+=" link $link"
  done
  for ns in "${made_ns[@]}"; do
    ip netns list | grep -q "^$ns\( \|$\)" && left+=" netns $ns"
  done
  [ -z "$left" ] || { echo "left behind:$left"; return 1; }
}

# netns_usable: root, ip(8), and `ip netns add` works.
netns_usable() {
  local probe=afns-$$-probe
  [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null \
    && ip netns add "$probe" 2>/dev/null && ip netns del "$probe"
}

# An unused /24 in 10.213.0.0/16, chosen from the pid so that parallel
# runs differ: nothing on this machine has an address or a route in it.
subnet_free() {
  [ -z "$(ip -4 -o addr show to "10.213.$1.0/24")" ] \
    && [ -z "$(ip -4 route show root "10.213.$1.0/24")" ] \
    && [ -z "$(ip -4 route show table all root "10.213.$1.0/24" 2>/dev/null)" ]
}
net=       # N of 10.213.N.0/24
bridge=    # the bridge in the root namespace
declare -A veth  # name -> its root-side veth
pick_subnet() {
  local base tries
  base=$((($$ % 240) + 10))
  for ((tries = 0; tries < 240; ++tries)); do
    if subnet_free $base; then
      net=$base
      return 0
    fi
    base=$(((base - 10 + 1) % 240 + 10))
  done
  fail "no free /24 in 10.213.0.0/16"
}

# make_bridge: bridge afbPID, up, 10.213.N.1/24 (where link_cut's w1
# listens).
make_bridge() {
  bridge=afb$$
  ip link add "$bridge" type bridge || fail "ip link add $bridge type bridge"
  made_links+=("$bridge")
  ip addr add "10.213.$net.1/24" dev "$bridge" || fail "address on $bridge"
  ip link set "$bridge" up || fail "ip link set $bridge up"
}

# netns_node NAME K: namespace afns-PID-NAME joined by veth afvPID-NAME
# (root side, a port of the bridge) / afpPID-NAME (inside,
# 10.213.N.K/24), lo up, and a node listening on 10.213.N.K (any free
# port) inside, started as start_node does (under a timeout(1) watchdog;
# node_pid, port, watcher).
netns_node() {
  local name=$1 k=$2 ns=afns-$$-$1 out=afv$$$1 in=afp$$$1
  ip netns add "$ns" || fail "ip netns add $ns"
  made_ns+=("$ns")
  ip link add "$out" type veth peer name "$in" netns "$ns" \
    || fail "ip link add $out type veth peer name $in netns $ns"
  made_links+=("$out")
  ip link set "$out" master "$bridge" || fail "ip link set $out master $bridge"
  ip link set "$out" up || fail "ip link set $out up"
  ip -n "$ns" addr add "10.213.$net.$k/24" dev "$in" || fail "address on $in in $ns"
  ip -n "$ns" link set "$in" up || fail "ip link set $in up in $ns"
  ip -n "$ns" link set lo up || fail "ip link set lo up in $ns"
  veth[$name]=$out
  node_exec=(ip netns exec "$ns")
  start_node "$name" "10.213.$net.$k:0"
  node_exec=()
}

