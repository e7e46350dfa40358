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
#     step and match 1 rank with the global batch;
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

# bad input across nodes: one error line, exit code 3, no hang
run_nodes 1 "$DDPTRAIN" "$T/missing.h5" $common --batch 16 >"$T/o" 2>"$T/e"
rc=$?
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "a missing input hung the 2-node job"
[ $rc -eq 3 ] || { cat "$T/o" "$T/e"; fail "missing input on 2 nodes: exit $rc, expected 3"; }
[ "$(grep -c 'ddptrain: error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "2 nodes: expected one error line"; }
echo ok
