#!/usr/bin/env bash
# TLS between `actorflow node` and `actorflow run` (CAF's OpenSSL module),
# and on the data plane between them: matching certificates work, a
# certificate from another CA and a peer without TLS are refused quickly,
# and the options are checked up front.
# Usage: tls_test.sh ACTORFLOW CASE
#
# A cluster CA with node and coordinator certificates, and a "rogue" CA
# with a certificate of its own, are made with openssl(1) in a temporary
# directory. Nodes are started here on 127.0.0.1:0 under timeout(1), their
# ports read from stdout; the EXIT trap stops exactly the nodes started here
# (SIGTERM, SIGKILL after a grace period, then wait).
set -u
bin=$1
case_name=$2
tmp=$(mktemp -d)

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../support/skip.sh
source "$here/../support/skip.sh"
command -v openssl >/dev/null || skip_missing "no openssl(1) to make certificates"
# shellcheck source=nodes.sh
source "$here/nodes.sh"
NODE_WATCHDOG_S=110
helpers=()   # other processes started here (silent peers)
cleanup() {
  local p
  for p in "${helpers[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  stop_nodes 5 >/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT


# Certificates: ca signs node and coord; rogue signs evil.
pki=$tmp/pki
mkdir -p "$pki"
make_ca() {
  openssl req -x509 -newkey rsa:2048 -noenc -days 2 -subj "/CN=$1" \
    -keyout "$pki/$1.key" -out "$pki/$1.pem" >>"$pki/log" 2>&1 \
    || { cat "$pki/log"; fail "openssl could not make CA $1"; }
}
make_cert() { # CA NAME
  openssl req -newkey rsa:2048 -noenc -subj "/CN=$2" \
    -keyout "$pki/$2.key" -out "$pki/$2.csr" >>"$pki/log" 2>&1 \
    && openssl x509 -req -in "$pki/$2.csr" -CA "$pki/$1.pem" \
         -CAkey "$pki/$1.key" -CAcreateserial -days 2 -out "$pki/$2.pem" \
         >>"$pki/log" 2>&1 \
    || { cat "$pki/log"; fail "openssl could not make certificate $2"; }
}
# make_expired CA NAME: a certificate of CA that was valid for one day in
# January 2025 (openssl ca sets the dates; x509 -req cannot).
make_expired() {
  local d=$pki/ca-$1
  mkdir -p "$d"; : >"$d/index.txt"; echo 01 >"$d/serial"
  printf '[ca]\ndefault_ca = c\n[c]\ndatabase = %s/index.txt\nnew_certs_dir = %s\nserial = %s/serial\ndefault_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n' \
    "$d" "$d" "$d" >"$d/ca.cnf"
  openssl req -newkey rsa:2048 -noenc -subj "/CN=$2" \
    -keyout "$pki/$2.key" -out "$pki/$2.csr" >>"$pki/log" 2>&1 \
    && openssl ca -batch -config "$d/ca.cnf" -cert "$pki/$1.pem" \
         -keyfile "$pki/$1.key" -in "$pki/$2.csr" -out "$pki/$2.pem" -notext \
         -startdate 20250101000000Z -enddate 20250102000000Z >>"$pki/log" 2>&1 \
    || { cat "$pki/log"; fail "openssl could not make the expired certificate $2"; }
}
# make_encrypted KEY OUT: KEY encrypted with the passphrase "secret", in
# PKCS#8 (BEGIN ENCRYPTED PRIVATE KEY).
make_encrypted() {
  openssl pkey -in "$1" -aes256 -passout pass:secret -out "$2" >>"$pki/log" 2>&1 \
    && grep -q 'BEGIN ENCRYPTED PRIVATE KEY' "$2" \
    || { cat "$pki/log"; fail "openssl could not encrypt $1"; }
}
make_ca ca; make_cert ca node; make_cert ca coord
make_ca rogue; make_cert rogue evil
tls_node=(--tls-cert "$pki/node.pem" --tls-key "$pki/node.key" --tls-ca "$pki/ca.pem")
tls_coord=(--tls-cert "$pki/coord.pem" --tls-key "$pki/coord.key" --tls-ca "$pki/ca.pem")
tls_rogue=(--tls-cert "$pki/evil.pem" --tls-key "$pki/evil.key" --tls-ca "$pki/rogue.pem")


# A small CTR training job: source and batcher in the coordinator, the two
# trainers and both parameter-server shards on node w1 (PORT).
ctr_topology() {
  topo=$tmp/tls_ctr.pbtxt
  cat >"$topo" <<EOF
name: "tls-ctr"
host { name: "w1" address: "127.0.0.1:$1" }
runtime { seed: 3 }
training {
  model {
    input: "ids"
    input_shape: [4]
    label: "label"
    layer { type: "embedding" rows: 200 dim: 4 }
    layer { type: "flatten" }
    layer { type: "dense" units: 1 }
    loss: "sigmoid_binary_cross_entropy"
  }
  optimizer { type: "adagrad" learning_rate: 0.2 }
  ps { shards: 2 staleness: 2 hosts: ["w1"] }
}
stage { name: "clicks" type: "ctr_source"
        ctr_source { records: 20000 features: 4 vocabulary: 50 model_seed: 5
                     split_seed: 0 epochs: 2 } }
stage { name: "batch" type: "batcher" input { stage: "clicks" }
        batcher { batch_size: 128 } }
stage { name: "train" type: "trainer" replicas: 2 hosts: ["w1"]
        input { stage: "batch" window: 4 } trainer { log_every_steps: 0 } }
stage { name: "test_clicks" type: "ctr_source"
        ctr_source { records: 5000 features: 4 vocabulary: 50 model_seed: 5
                     split_seed: 1 } }
stage { name: "test_batch" type: "batcher" input { stage: "test_clicks" }
        batcher { batch_size: 1000 } }
stage { name: "evaluate" type: "evaluator" input { stage: "test_batch" }
        evaluator { every_steps: 300 reference_score: "logit" } }
EOF
}

run_limited() { local limit=$1; shift
  timeout -k 5 "$limit" "$bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?; }

# run_quick LIMIT_S ARGS...: like run_limited, and fails if it took longer.
run_quick() { local limit=$1 start elapsed; shift
  start=$(date +%s.%N)
  run_limited 60 "$@"
  elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  echo "took $elapsed s (exit $rc)"
  awk -v t="$elapsed" -v l="$limit" 'BEGIN { exit !(t <= l) }' \
    || fail "took $elapsed s, more than $limit s"
}

# The CTR job with matching certificates, trainers and shards on w1.
run_ctr_ok() {
  ctr_topology "${port[w1]}"
  run_limited 100 run "$topo" --no-progress "${tls_coord[@]}"
  expect_rc 0
  expect_out "job 'tls-ctr' finished"
  expect_out "^  training: [0-9]\+ steps, 40000 samples, "
  expect_out "^  test (step [0-9]\+): loss [0-9.]\+, AUC 0\.[0-9]\+"
}

# expect_files_refused node|run CERT KEY MESSAGE: `actorflow node` (or
# `run` of a CTR job) with these TLS files stops at once (exit 2, within
# 15 s) with MESSAGE on stderr, and neither listens nor runs the job.
expect_files_refused() {
  local cmd=$1 cert=$2 key=$3 message=$4
  ctr_topology 1
  if [ "$cmd" = node ]; then
    run_quick 15 node --listen 127.0.0.1:0 --tls-cert "$cert" \
      --tls-key "$key" --tls-ca "$pki/ca.pem"
  else
    run_quick 15 run "$topo" --no-progress --tls-cert "$cert" \
      --tls-key "$key" --tls-ca "$pki/ca.pem"
  fi
  expect_rc 2
  expect_err "$message"
  ! grep -q 'listening on' "$tmp/out" || fail "the node listened"
  ! grep -q "job 'tls-ctr'" "$tmp/out" || fail "the job ran"
  cat "$tmp/err"
}

# expect_foreign_refused PORT WHAT: a raw TLS client on 127.0.0.1:PORT
# that trusts the cluster's CA is refused with a certificate of the rogue
# CA, and without any certificate. (-ign_eof: wait for the verdict, which
# TLS 1.3 sends after the client's side of the handshake is done.)
expect_foreign_refused() {
  timeout 20 openssl s_client -ign_eof -connect "127.0.0.1:$1" \
    -CAfile "$pki/ca.pem" -cert "$pki/evil.pem" -key "$pki/evil.key" \
    </dev/null >"$tmp/s_client" 2>&1
  grep -aq 'alert unknown ca' "$tmp/s_client" \
    || { cat "$tmp/s_client"; fail "$2 did not refuse a certificate of another CA"; }
  timeout 20 openssl s_client -ign_eof -connect "127.0.0.1:$1" \
    -CAfile "$pki/ca.pem" </dev/null >"$tmp/s_client" 2>&1
  grep -aq 'alert certificate required' "$tmp/s_client" \
    || { cat "$tmp/s_client"; fail "$2 did not refuse a client without a certificate"; }
}

# Every node still running, then stopped cleanly by SIGTERM.
expect_alive_clean_end() {
  local n
  for n in "${nodes[@]}"; do
    alive "${node_pid[$n]}" || fail "node $n is gone"
  done
  expect_clean_end
}

case $case_name in
  mutual)
    start_node w1 127.0.0.1:0 "${tls_node[@]}"
    node_has w1 "node: TLS with certificate"
    run_ctr_ok
    node_has w1 "node: started train\[0\]"
    node_has w1 "node: started train\[1\]"
    node_has w1 "node: started ps\[0\]"
    expect_alive_clean_end
    ;;
  rogue)
    start_node w1 127.0.0.1:0 "${tls_node[@]}"
    ctr_topology "${port[w1]}"
    # A coordinator with a certificate from another CA.
    run_quick 15 run "$topo" --no-progress "${tls_rogue[@]}"
    expect_rc 1
    expect_err "host 'w1' (127\.0\.0\.1:${port[w1]}) refused the TLS connection"
    cat "$tmp/err"
    # A raw TLS client with the rogue certificate that trusts the cluster's
    # CA (our own check would stop actorflow from even trying): the node
    # itself refuses the certificate.
    expect_foreign_refused "${port[w1]}" "the node"
    ! grep -q 'node: started' "$tmp/node-w1.err" || fail "the node started actors for a refused peer"
    # The node still serves a coordinator with the right certificate.
    alive "${node_pid[w1]}" || fail "node w1 is gone after the refusals"
    run_ctr_ok
    expect_alive_clean_end
    ;;
  data_plane)
    # With --tls-* the data plane (runtime/net/data_plane.hpp) is TLS too, with
    # the same files and the same mutual check: trainers on w2, shards on
    # w1, the source and the batcher in the coordinator; w1's data plane
    # takes TCP only (--data-socket tcp), w2's also a Unix socket.
    start_node w1 127.0.0.1:0 "${tls_node[@]}" --data-socket tcp
    start_node w2 127.0.0.1:0 "${tls_node[@]}"
    ctr_topology "${port[w1]}"
    sed -i -e "s/^host { name: \"w1\".*/&\nhost { name: \"w2\" address: \"127.0.0.1:${port[w2]}\" }/" \
      -e 's/replicas: 2 hosts: \["w1"\]/replicas: 2 hosts: ["w2"]/' "$topo"
    grep -q 'hosts: \["w2"\]' "$topo" || fail "the trainers are not on w2"
    run_limited 100 run "$topo" --no-progress --report-json "$tmp/report.json" "${tls_coord[@]}"
    expect_rc 0
    expect_out "job 'tls-ctr' finished"
    expect_err "data plane: 2 nodes connected directly over TLS"
    node_has w1 "node: data port 127\.0\.0\.1:[0-9]* (TLS)"
    # Which of w1 and w2 dials the other depends on timing, not the
    # transport: TCP either way, as w1 has no Unix socket.
    cat "$tmp/node-w1.err" "$tmp/node-w2.err" \
      | grep -q "data plane: connected to w[12] over TLS over TCP" \
      || fail "w1 and w2 did not connect over TLS over TCP"
    ! grep -q "Unix" "$tmp/node-w1.err" || fail "w1 has a Unix socket"
    expect_err "data plane: connected to w1 over TLS over TCP"
    expect_err "data plane: connected to w2 over TLS over a Unix socket"
    node_has w2 "data plane: unix:pid [0-9]* connected over TLS over a Unix socket"
    expect_coordinator_share "$tmp/report.json"
    dport=$(sed -n 's/.*node: data port 127\.0\.0\.1:\([0-9]*\) (TLS).*/\1/p' "$tmp/node-w1.err" | head -n 1)
    [ -n "$dport" ] || fail "no data port in w1's log"
    # No plaintext: a hello in the clear is not a TLS handshake.
    python3 - "$dport" <<'PY' || fail "the TLS data port did not close a plaintext peer"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"AFDP" + bytes(44))
try:
    sys.exit(0 if s.recv(1 << 16) == b"" else 1)
except ConnectionResetError:
    sys.exit(0)
PY
    wait_log w1 "data plane: closed the connection from 127\.0\.0\.1:[0-9]*: TLS handshake failed: the peer does not speak TLS" 10
    # A certificate of another CA, and none at all, are refused as on the
    # node's CAF port.
    expect_foreign_refused "$dport" "the data port"
    wait_log w1 "TLS handshake failed: the peer's certificate: unable to get local issuer certificate" 10
    grep "data plane: closed the connection from" "$tmp/node-w1.err"
    # The node's data port still serves the job's peers.
    run_limited 100 run "$topo" --no-progress "${tls_coord[@]}"
    expect_rc 0
    expect_out "job 'tls-ctr' finished"
    expect_alive_clean_end
    # The three refusals, counted.
    node_has w1 "node: data plane: [0-9]* connections accepted, .*, 3 refused (hello or TLS), 0 broken"
    ;;
  plain_to_tls)
    start_node w1 127.0.0.1:0 "${tls_node[@]}"
    ctr_topology "${port[w1]}"
    run_quick 15 run "$topo" --no-progress
    expect_rc 1
    expect_err "host 'w1' (127\.0\.0\.1:${port[w1]}) closed the connection during the handshake"
    expect_err "does the node require TLS"
    cat "$tmp/err"
    ! grep -q 'node: started' "$tmp/node-w1.err" || fail "the node started actors for a peer without TLS"
    run_ctr_ok
    expect_alive_clean_end
    ;;
  tls_to_plain)
    start_node w1
    ctr_topology "${port[w1]}"
    run_quick 15 run "$topo" --no-progress "${tls_coord[@]}"
    expect_rc 1
    expect_err "host 'w1' (127\.0\.0\.1:${port[w1]}) refused the TLS connection"
    cat "$tmp/err"
    ! grep -q 'node: started' "$tmp/node-w1.err" || fail "the node started actors for a TLS peer"
    expect_alive_clean_end
    ;;
  mute_peer)
    # Peers that accept or open a TCP connection and then send nothing.
    # CAF 0.17.6's OpenSSL module spins while such a handshake is pending
    # and its shutdown waits for it (CAF issue #1060): the CLI bounds that.
    python3 - "$tmp/mute.port" <<'EOF' &
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0)); s.listen(8)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
s.settimeout(60)
held = []
try:
    while True:
        c, _ = s.accept(); held.append(c)
except OSError:
    pass
EOF
    mute_server=$!
    helpers+=("$mute_server")
    for ((i = 0; i < 100; ++i)); do [ -s "$tmp/mute.port" ] && break; sleep 0.1; done
    [ -s "$tmp/mute.port" ] || fail "the mute server did not start"
    ctr_topology "$(cat "$tmp/mute.port")"
    run_quick 20 run "$topo" --no-progress "${tls_coord[@]}"
    kill "$mute_server" 2>/dev/null; wait "$mute_server" 2>/dev/null
    expect_rc 1
    expect_err "host 'w1' (127\.0\.0\.1:[0-9]*) accepted the connection but did not complete the TLS handshake"
    cat "$tmp/err"
    # A TLS node with a silent client connected: still serves a job, and
    # stops on SIGTERM within seconds.
    start_node w1 127.0.0.1:0 "${tls_node[@]}"
    python3 -c 'import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); time.sleep(60)' \
      "${port[w1]}" &
    silent_client=$!
    helpers+=("$silent_client")
    sleep 1
    # Without leak checks in the coordinator: while the node's I/O loop
    # spins, CAF's shutdown of the coordinator's TLS connection
    # occasionally (about 1 run in 15 here) leaves CAF's BASP broker
    # behind at exit (the same flaw).
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" run_ctr_ok
    start=$(date +%s.%N)
    stop_nodes 15
    elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    kill "$silent_client" 2>/dev/null; wait "$silent_client" 2>/dev/null
    echo "node stopped in $elapsed s with a silent client connected (exit ${node_rc[w1]})"
    [ "${node_rc[w1]}" -eq 0 ] || fail "node w1 exited with ${node_rc[w1]} on SIGTERM"
    awk -v t="$elapsed" 'BEGIN { exit !(t <= 12) }' || fail "node took $elapsed s to stop"
    node_has w1 "node: stopping"
    no_sanitizer_reports
    ;;
  encrypted_key)
    # docs/multi-host.md: the key must be unencrypted; an encrypted one is
    # refused up front (exit 2, naming the option and the file), with no
    # passphrase prompt, also on a terminal.
    make_encrypted "$pki/node.key" "$pki/node-enc.key"
    # (also the traditional format: Proc-Type: 4,ENCRYPTED)
    openssl rsa -in "$pki/coord.key" -aes256 -passout pass:secret -traditional \
      -out "$pki/coord-enc.key" >>"$pki/log" 2>&1 \
      && grep -q 'Proc-Type: 4,ENCRYPTED' "$pki/coord-enc.key" \
      || { cat "$pki/log"; fail "openssl could not encrypt coord.key"; }
    # The encrypted keys are the right ones: openssl decrypts them.
    openssl pkey -in "$pki/node-enc.key" -passin pass:secret -noout \
      || fail "openssl cannot read node-enc.key with its passphrase"
    expect_files_refused node "$pki/node.pem" "$pki/node-enc.key" \
      "--tls-key: '$pki/node-enc.key' is encrypted"
    expect_files_refused run "$pki/coord.pem" "$pki/coord-enc.key" \
      "--tls-key: '$pki/coord-enc.key' is encrypted"
    # On a terminal: no "Enter PEM pass phrase" prompt to wait on.
    if command -v script >/dev/null; then
      start=$(date +%s.%N)
      timeout -k 5 30 script -qec "'$bin' node --listen 127.0.0.1:0 --tls-cert '$pki/node.pem' --tls-key '$pki/node-enc.key' --tls-ca '$pki/ca.pem'" \
        "$tmp/typescript" >"$tmp/out" 2>&1 </dev/null
      rc=$?
      elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
      echo "on a terminal: took $elapsed s (exit $rc)"
      expect_rc 2
      grep -q "is encrypted" "$tmp/typescript" || fail "no 'is encrypted' on the terminal"
      ! grep -qi "pass phrase\|passphrase:" "$tmp/typescript" || fail "a passphrase prompt on the terminal"
      awk -v t="$elapsed" 'BEGIN { exit !(t <= 15) }' || fail "took $elapsed s on a terminal"
    fi
    # A node whose key file is replaced by an encrypted one while it runs,
    # and its certificate by one the key does not fit: it goes on with the
    # files it checked at start (read once; CAF, which loads them for every
    # connection, would prompt for the passphrase or abort the process).
    cp "$pki/node.key" "$pki/w1.key"; cp "$pki/node.pem" "$pki/w1.pem"
    start_node w1 127.0.0.1:0 --tls-cert "$pki/w1.pem" --tls-key "$pki/w1.key" \
      --tls-ca "$pki/ca.pem"
    cp "$pki/node-enc.key" "$pki/new.key"; mv "$pki/new.key" "$pki/w1.key"
    cp "$pki/coord.pem" "$pki/new.pem"; mv "$pki/new.pem" "$pki/w1.pem"
    run_ctr_ok
    ! grep -qi 'pass phrase' "$tmp/node-w1.err" || fail "the node asked for a passphrase"
    node_has w1 "node: started train\[0\]"
    expect_alive_clean_end
    ;;
  expired)
    # docs/multi-host.md: a certificate the CA does not accept (expired) is
    # refused up front (exit 2, naming the option and the file); and a peer
    # refuses one, with the reason, within seconds.
    make_expired ca old
    openssl verify -CAfile "$pki/ca.pem" "$pki/old.pem" >"$tmp/verify" 2>&1 \
      && fail "openssl accepts the expired certificate"
    grep -q 'certificate has expired' "$tmp/verify" || { cat "$tmp/verify"; fail "old.pem is not expired"; }
    for cmd in node run; do
      expect_files_refused $cmd "$pki/old.pem" "$pki/old.key" \
        "--tls-cert: '$pki/old.pem' does not pass the check against --tls-ca '$pki/ca.pem': certificate has expired"
    done
    # A raw TLS client with the expired certificate (our own check stops
    # actorflow from trying): the node refuses it, saying why.
    start_node w1 127.0.0.1:0 "${tls_node[@]}"
    start=$(date +%s.%N)
    timeout 20 openssl s_client -ign_eof -connect "127.0.0.1:${port[w1]}" \
      -CAfile "$pki/ca.pem" -cert "$pki/old.pem" -key "$pki/old.key" \
      </dev/null >"$tmp/s_client" 2>&1
    elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    grep -aq 'alert certificate expired' "$tmp/s_client" \
      || { cat "$tmp/s_client"; fail "the node did not refuse an expired certificate"; }
    echo "the node refused the expired client certificate in $elapsed s"
    awk -v t="$elapsed" 'BEGIN { exit !(t <= 10) }' || fail "the refusal took $elapsed s"
    ! grep -q 'node: started' "$tmp/node-w1.err" || fail "the node started actors for a refused peer"
    alive "${node_pid[w1]}" || fail "node w1 is gone after the refusal"
    # A TLS server with the expired certificate in place of a node (our
    # own check stops `actorflow node` from serving with it): the
    # coordinator refuses it, at once.
    timeout 60 openssl s_server -accept 127.0.0.1:0 -cert "$pki/old.pem" \
      -key "$pki/old.key" -CAfile "$pki/ca.pem" -Verify 1 </dev/null \
      >"$tmp/s_server" 2>&1 &
    helpers+=("$!")
    for ((i = 0; i < 100; ++i)); do
      grep -q '^ACCEPT ' "$tmp/s_server" && break; sleep 0.1
    done
    fake=$(sed -n 's/^ACCEPT 127\.0\.0\.1:\([0-9]\+\)$/\1/p' "$tmp/s_server")
    [ -n "$fake" ] || { cat "$tmp/s_server"; fail "openssl s_server did not start"; }
    ctr_topology "$fake"
    run_quick 15 run "$topo" --no-progress "${tls_coord[@]}"
    expect_rc 1
    expect_err "host 'w1' (127\.0\.0\.1:$fake) refused the TLS connection"
    cat "$tmp/err"
    # The node refused nothing it should serve.
    ctr_topology "${port[w1]}"
    run_ctr_ok
    expect_alive_clean_end
    ;;
  usage)
    ctr_topology 1
    # Only some of the three options.
    run_limited 20 node --listen 127.0.0.1:0 --tls-cert "$pki/node.pem"
    expect_rc 2
    expect_err "tls-cert, --tls-key and --tls-ca go together: --tls-key and --tls-ca missing"
    expect_err "^usage: actorflow node"
    ! grep -q 'listening on' "$tmp/out" || fail "the node listened"
    run_limited 20 run "$topo" --tls-key "$pki/coord.key" --tls-ca "$pki/ca.pem"
    expect_rc 2
    expect_err "go together: --tls-cert missing"
    expect_err "^usage: actorflow run"
    # A file that does not exist, named.
    run_limited 20 node --listen 127.0.0.1:0 --tls-cert "$pki/nope.pem" \
      --tls-key "$pki/node.key" --tls-ca "$pki/ca.pem"
    expect_rc 2
    expect_err "--tls-cert: cannot read '$pki/nope.pem': No such file or directory"
    run_limited 20 run "$topo" "${tls_coord[@]:0:4}" --tls-ca "$pki/missing-ca.pem"
    expect_rc 2
    expect_err "--tls-ca: cannot read '$pki/missing-ca.pem': No such file or directory"
    # Unreadable (not for root, who reads everything).
    if [ "$(id -u)" -ne 0 ]; then
      cp "$pki/node.key" "$pki/locked.key"; chmod 000 "$pki/locked.key"
      run_limited 20 node --listen 127.0.0.1:0 --tls-cert "$pki/node.pem" \
        --tls-key "$pki/locked.key" --tls-ca "$pki/ca.pem"
      expect_rc 2
      expect_err "--tls-key: cannot read '$pki/locked.key': Permission denied"
    fi
    # Files that are there but wrong: not PEM, a key of another
    # certificate, a certificate the CA did not sign.
    run_limited 20 node --listen 127.0.0.1:0 --tls-cert "$topo" \
      --tls-key "$pki/node.key" --tls-ca "$pki/ca.pem"
    expect_rc 2
    expect_err "--tls-cert: '$topo' is not a PEM certificate"
    run_limited 20 node --listen 127.0.0.1:0 --tls-cert "$pki/node.pem" \
      --tls-key "$pki/coord.key" --tls-ca "$pki/ca.pem"
    expect_rc 2
    expect_err "--tls-key: '$pki/coord.key' is not the key of the certificate in '$pki/node.pem'"
    run_limited 20 run "$topo" --tls-cert "$pki/evil.pem" \
      --tls-key "$pki/evil.key" --tls-ca "$pki/ca.pem"
    expect_rc 2
    expect_err "--tls-cert: '$pki/evil.pem' does not pass the check against --tls-ca '$pki/ca.pem'"
    # --help lists the options.
    run_limited 20 node --help
    expect_rc 0
    for o in --tls-cert --tls-key --tls-ca; do expect_out "$o"; done
    no_sanitizer_reports
    ;;
  *)
    echo "unknown case $case_name"; exit 2 ;;
esac
echo "PASS: $case_name"
