#!/bin/sh
# test_multinode.sh -- training across two nodes, simulated on this machine:
# two network namespaces joined by a veth pair, each with its own hostname,
# and mpirun's remote-shell agent replaced by a script that starts Open MPI's
# daemon inside the namespace of the "host" it is given.  Open MPI then sees
# two nodes: ranks on different nodes talk over TCP, and ddptrain's
# all-reduce takes its multi-node path (the ring over point-to-point
# messages) instead of shared memory.  Checks that
#   - 2 ranks on 2 nodes give bit-identically the weights of 2 ranks on one
#     node (shared memory), and with SyncBN and dropout match 1 rank with
#     the global batch (relative difference <= 1e-5);
#   - 4 ranks on 2 nodes (2 per node) keep identical replicas after every
#     step and match 1 rank with the global batch, and so do --zero 1 and
#     --zero 2 there, bit for bit;
#   - a bit flipped in one rank's parameters or optimizer state (--inject
#     bitflip) is named by --check-replicas with the rank, its host and the
#     tensor, exit code 6 (the replica check on the ring path);
#   - a rank on node b that stops responding (--inject hang) is named, with
#     its host, by rank 0's watchdog over TCP between the nodes (exit 10);
#   - bad input is one error line and exit code 3, no hang, across nodes.
# Needs root (namespaces), ip (iproute2) and unshare (util-linux); skipped
# (77) otherwise, unless DDP_REQUIRE_MULTINODE=1 (.ci/run sets it).
. ./testenv.sh || exit 99
set -u

skip() { ddp_skip DDP_REQUIRE_MULTINODE "$*"; }
[ "$DDP_MPIEXEC_FLAVOR" = openmpi ] || skip "the two-node simulation drives Open MPI's mpirun"
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
for p in ip unshare; do
  command -v "$p" >/dev/null 2>&1 || skip "$p not installed (scripts/install-deps installs it)"
done

T=$(mktemp -d "${TMPDIR:-/tmp}/ddpnodes.XXXXXX") || exit 99
id=$(( $$ % 200 + 20 ))
nsA="ddp${id}A" nsB="ddp${id}B"
net="10.${id}.77"
cleanup() {
  ip netns del "$nsA" 2>/dev/null
  ip netns del "$nsB" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
ip netns add "$nsA" && ip netns add "$nsB" \
  && ip link add "ddp${id}a" type veth peer name "ddp${id}b" \
  && ip link set "ddp${id}a" netns "$nsA" && ip link set "ddp${id}b" netns "$nsB" \
  && ip -n "$nsA" addr add "$net.1/24" dev "ddp${id}a" \
  && ip -n "$nsB" addr add "$net.2/24" dev "ddp${id}b" \
  && ip -n "$nsA" link set "ddp${id}a" up && ip -n "$nsB" link set "ddp${id}b" up \
  && ip -n "$nsA" link set lo up && ip -n "$nsB" link set lo up \
  || skip "cannot create network namespaces and a veth pair here"

# mpirun runs on node A; it starts the daemon of node B through this agent
cat >"$T/agent" <<EOF
#!/bin/sh
host=\$1; shift
case "\$host" in
  $net.1) ns=$nsA; hn=ddpnode${id}a ;;
  $net.2) ns=$nsB; hn=ddpnode${id}b ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$hn; \$*"
EOF
chmod +x "$T/agent"
# run_nodes PER_NODE cmd...: PER_NODE ranks on each of the two nodes
run_nodes() {
  printf '%s slots=%s\n%s slots=%s\n' "$net.1" "$1" "$net.2" "$1" >"$T/hosts"
  _np=$(( 2 * $1 )); shift
  timeout -k 10 300 ip netns exec "$nsA" unshare --uts sh -c "hostname ddpnode${id}a; exec \"\$@\"" sh \
    $MPIEXEC --allow-run-as-root --oversubscribe --bind-to none --hostfile "$T/hosts" -np "$_np" \
    --map-by node --mca plm_rsh_agent "$T/agent" --mca btl self,vader,tcp \
    --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" \
    -x OPENBLAS_NUM_THREADS=1 -x OMPI_MCA_btl_vader_single_copy_mechanism=none "$@"
}

"$DDPPREP" synthetic --classes 6 --features 24 --samples 1200 --seed 3 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
common="--steps 20 --log-every 0 --eval-every 0 --seed 11 --momentum 0.9 --lr 0.05 \
  --model linear:48,bn,relu,dropout:0.25,linear:32,bn,gelu,linear:auto"

# 2 ranks on 2 nodes vs 2 ranks on one node vs 1 rank
run_nodes 1 "$DDPTRAIN" "$T/d.h5" $common --batch 16 --save "$T/nodes2.h5" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "2 ranks on 2 nodes"; }
grep -q "2 ranks on 2 nodes (1 per node)" "$T/o" || { cat "$T/o"; fail "the ranks did not see 2 nodes"; }
# across nodes --comm-thread auto runs the progress thread; off gives the same bits
grep -q "comm thread  on" "$T/o" || { cat "$T/o"; fail "2 nodes: --comm-thread auto did not start the progress thread"; }
run_nodes 1 "$DDPTRAIN" "$T/d.h5" $common --batch 16 --comm-thread off --save "$T/nodes2off.h5" \
  >"$T/o" 2>&1 || { cat "$T/o"; fail "2 ranks on 2 nodes, --comm-thread off"; }
grep -q "comm thread  off" "$T/o" || { cat "$T/o"; fail "--comm-thread off: the table does not say off"; }
"$WEIGHTS_CMP" "$T/nodes2.h5" "$T/nodes2off.h5" 0 >"$T/cmp" \
  || { cat "$T/cmp"; fail "2 nodes: --comm-thread on and off trained different weights"; }
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $common --batch 16 --save "$T/node1.h5" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "2 ranks on one node"; }
mpirun_np 1 "$DDPTRAIN" "$T/d.h5" $common --batch 32 --save "$T/one.h5" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "1 rank"; }
"$WEIGHTS_CMP" "$T/nodes2.h5" "$T/node1.h5" 0 >"$T/cmp" \
  || { cat "$T/cmp"; fail "2 ranks: 2 nodes and one node trained different weights"; }
"$WEIGHTS_CMP" "$T/nodes2.h5" "$T/one.h5" 1e-5 >"$T/cmp" \
  || { cat "$T/cmp"; fail "2 ranks on 2 nodes vs 1 rank with the global batch"; }
echo "2 nodes x 1 rank vs 1 rank: $(tail -n 1 "$T/cmp")"

# 4 ranks on 2 nodes: replicas identical after every step; equivalence
run_nodes 2 "$DDPTRAIN" "$T/d.h5" $common --batch 8 --check-replicas 1 --save "$T/nodes4.h5" \
  >"$T/o" 2>&1 || { cat "$T/o"; fail "4 ranks on 2 nodes"; }
grep -q "4 ranks on 2 nodes (2 per node)" "$T/o" || { cat "$T/o"; fail "4 ranks: not 2 per node"; }
"$WEIGHTS_CMP" "$T/nodes4.h5" "$T/one.h5" 1e-5 >"$T/cmp" \
  || { cat "$T/cmp"; fail "4 ranks on 2 nodes vs 1 rank with the global batch"; }
echo "2 nodes x 2 ranks vs 1 rank: $(tail -n 1 "$T/cmp")"
# ZeRO across the nodes (the ring's reduce-scatter and all-gather): the
# same bits as --zero 0, replicas of the parameters identical every step
for z in 1 2; do
  run_nodes 2 "$DDPTRAIN" "$T/d.h5" $common --batch 8 --check-replicas 1 --zero $z \
    --save "$T/nodes4z$z.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "4 ranks on 2 nodes, --zero $z"; }
  grep -q "zero         stage $z: optimizer state of" "$T/o" || { cat "$T/o"; fail "--zero $z: no plan"; }
  "$WEIGHTS_CMP" "$T/nodes4z$z.h5" "$T/nodes4.h5" 0 >"$T/cmp" \
    || { cat "$T/cmp"; fail "4 ranks on 2 nodes: --zero $z is not --zero 0 bit for bit"; }
done
echo "2 nodes x 2 ranks: --zero 1 and 2 = --zero 0, bit for bit"

# a flipped bit on the ring path: in rank 3's first parameter (4 ranks, node
# b holds ranks 1 and 3), and in rank 1's SGD momentum (2 ranks)
flipped() { # flipped PER_NODE INJECT NEEDLE...
  _per=$1 _inj=$2; shift 2
  run_nodes "$_per" "$DDPTRAIN" "$T/d.h5" $common --batch 8 --check-replicas 1 --inject "$_inj" \
    >"$T/o" 2>"$T/e"
  rc=$?
  [ $rc -eq 6 ] || { cat "$T/o" "$T/e"; fail "--inject $_inj on 2 nodes: exit $rc, expected 6"; }
  [ "$(grep -c 'ddptrain: error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "$_inj: expected one error line"; }
  for _s in "$@"; do
    grep -qF "$_s" "$T/e" || { cat "$T/e"; fail "--inject $_inj on 2 nodes: message lacks '$_s'"; }
  done
}
flipped 2 bitflip:3:2 "replicas diverged after step 2: rank 3's layers.0.weight differs from rank 0's" \
  "rank 3 is on host ddpnode${id}b"
flipped 1 bitflip:1:3:momentum_buffer:layers.4.weight \
  "replicas diverged after step 3: rank 1's momentum_buffer:layers.4.weight differs from rank 0's" \
  "rank 1 is on host ddpnode${id}b"
echo "bit flips on 2 nodes: named"

# the watchdog across nodes: rank 3 (node b) stops responding; rank 0's
# watchdog learns it over TCP between the nodes and names the rank, its host
# and the collective within the timeout + 10 s (start-up included)
t0=$(date +%s)
run_nodes 2 "$DDPTRAIN" "$T/d.h5" $common --batch 8 --steps 200 --timeout 3 --inject hang:3:5 \
  >"$T/o" 2>"$T/e"
rc=$? dt=$(($(date +%s) - t0))
[ $rc -eq 10 ] || { cat "$T/o" "$T/e"; fail "hang of rank 3 on 2 nodes: exit $rc, expected 10"; }
[ $dt -le 15 ] || { cat "$T/e"; fail "hang of rank 3 on 2 nodes: took $dt s (timeout 3)"; }
grep -qE "watchdog: .* at step 5 .*rank 3 \(ddpnode${id}b\) did not arrive" "$T/e" \
  || { cat "$T/e"; fail "hang on 2 nodes: the report does not name rank 3 on ddpnode${id}b"; }
grep -q "cannot reach rank 0's watchdog" "$T/e" && { cat "$T/e"; fail "2 nodes: the watchdog was not reached"; }
echo "hang of rank 3 on node b: exit 10 after $dt s, named"

# bad input across nodes: one error line, exit code 3, no hang
run_nodes 1 "$DDPTRAIN" "$T/missing.h5" $common --batch 16 >"$T/o" 2>"$T/e"
rc=$?
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "a missing input hung the 2-node job"
[ $rc -eq 3 ] || { cat "$T/o" "$T/e"; fail "missing input on 2 nodes: exit $rc, expected 3"; }
[ "$(grep -c 'ddptrain: error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "2 nodes: expected one error line"; }
echo ok
