#!/bin/sh
# test_multinode.sh -- training across two nodes, simulated on this machine:
# two network namespaces joined by a veth pair, each with its own hostname,
# and mpirun's remote-shell agent replaced by a script that starts Open MPI's
# daemon inside the namespace of the "host" it is given.  Open MPI then sees
# two nodes: ranks on different nodes talk over TCP, and ddptrain's
# all-reduce takes its multi-node path (the hierarchical all-reduce: node-
# shared memory, then point-to-point messages between the nodes) instead
# of one node's shared memory.  Checks that
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
#   - bad input is one error line and exit code 3, no hang, across nodes;
#   - on three nodes of 2, 1 and 1 ranks (tests/simnodes.sh's layouts) the
#     ranks land node by node, every node's link carries the all-reduce,
#     and 4 ranks match 1 rank with the global batch;
#   - the hierarchical all-reduce (--allreduce auto across nodes) runs on
#     2x2, 3x1 and 2+1, with identical replicas every step and 1-rank
#     equivalence, and with 2 ranks per node each node's link carries the
#     gradient bytes of 1 rank per node (a flat ring: 1.5 times).
# The nodes come from tests/simnodes.sh (a bridge, so any layout works);
# ranks land node by node (with 2 per node: ranks 0 and 1 on node a).
# Needs root (namespaces), ip (iproute2) and unshare (util-linux); skipped
# (77) otherwise, unless DDP_REQUIRE_MULTINODE=1 (.ci/run sets it).
. ./testenv.sh || exit 99
. "$top_srcdir/tests/simnodes.sh" || exit 99
set -u

skip() { ddp_skip DDP_REQUIRE_MULTINODE "$*"; }
[ "$DDP_MPIEXEC_FLAVOR" = openmpi ] || skip "the node simulation drives Open MPI's mpirun"
simnodes_check || skip "$SIMNODES_WHY"

T=$(mktemp -d "${TMPDIR:-/tmp}/ddpnodes.XXXXXX") || exit 99
trap 'simnodes_down; rm -rf "$T"' EXIT
simnodes_up 1,1 unlimited ddp || skip "$SIMNODES_WHY"
# run_nodes LAYOUT cmd...: ranks on the two nodes as LAYOUT says (ranks per
# node, e.g. 2,2)
run_nodes() {
  simnodes_layout "$1" || fail "$SIMNODES_WHY"
  shift
  SIMNODES_TIMEOUT=300 simnodes_mpirun -x OPENBLAS_NUM_THREADS=1 "$@"
}

"$DDPPREP" synthetic --classes 6 --features 24 --samples 1200 --seed 3 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
common="--steps 20 --log-every 0 --eval-every 0 --seed 11 --momentum 0.9 --lr 0.05 \
  --model linear:48,bn,relu,dropout:0.25,linear:32,bn,gelu,linear:auto"

# 2 ranks on 2 nodes vs 2 ranks on one node vs 1 rank
run_nodes 1,1 "$DDPTRAIN" "$T/d.h5" $common --batch 16 --save "$T/nodes2.h5" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "2 ranks on 2 nodes"; }
grep -q "2 ranks on 2 nodes (1 per node)" "$T/o" || { cat "$T/o"; fail "the ranks did not see 2 nodes"; }
# across nodes --comm-thread auto runs the progress thread; off gives the same bits
grep -q "comm thread  on" "$T/o" || { cat "$T/o"; fail "2 nodes: --comm-thread auto did not start the progress thread"; }
run_nodes 1,1 "$DDPTRAIN" "$T/d.h5" $common --batch 16 --comm-thread off --save "$T/nodes2off.h5" \
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
run_nodes 2,2 "$DDPTRAIN" "$T/d.h5" $common --batch 8 --check-replicas 1 --save "$T/nodes4.h5" \
  >"$T/o" 2>&1 || { cat "$T/o"; fail "4 ranks on 2 nodes"; }
grep -q "4 ranks on 2 nodes (2 per node)" "$T/o" || { cat "$T/o"; fail "4 ranks: not 2 per node"; }
grep -q "collectives by algorithm: .*hier [1-9]" "$T/o" \
  || { cat "$T/o"; fail "4 ranks on 2 nodes: the gradients did not take the hierarchical all-reduce"; }
"$WEIGHTS_CMP" "$T/nodes4.h5" "$T/one.h5" 1e-5 >"$T/cmp" \
  || { cat "$T/cmp"; fail "4 ranks on 2 nodes vs 1 rank with the global batch"; }
echo "2 nodes x 2 ranks vs 1 rank: $(tail -n 1 "$T/cmp")"
# ZeRO across the nodes (the ring's reduce-scatter and all-gather): the
# same bits as --zero 0, replicas of the parameters identical every step
for z in 1 2; do
  run_nodes 2,2 "$DDPTRAIN" "$T/d.h5" $common --batch 8 --check-replicas 1 --zero $z \
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
  run_nodes "$_per,$_per" "$DDPTRAIN" "$T/d.h5" $common --batch 8 --check-replicas 1 --inject "$_inj" \
    >"$T/o" 2>"$T/e"
  rc=$?
  [ $rc -eq 6 ] || { cat "$T/o" "$T/e"; fail "--inject $_inj on 2 nodes: exit $rc, expected 6"; }
  [ "$(grep -c 'ddptrain: error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "$_inj: expected one error line"; }
  for _s in "$@"; do
    grep -qF "$_s" "$T/e" || { cat "$T/e"; fail "--inject $_inj on 2 nodes: message lacks '$_s'"; }
  done
}
flipped 2 bitflip:3:2 "replicas diverged after step 2: rank 3's layers.0.weight differs from rank 0's" \
  "rank 3 is on host $(simnodes_host 1)"
flipped 1 bitflip:1:3:momentum_buffer:layers.4.weight \
  "replicas diverged after step 3: rank 1's momentum_buffer:layers.4.weight differs from rank 0's" \
  "rank 1 is on host $(simnodes_host 1)"
echo "bit flips on 2 nodes: named"

# the watchdog across nodes: rank 3 (node b) stops responding; rank 0's
# watchdog learns it over TCP between the nodes and names the rank, its host
# and the collective: it says so within the timeout + 5 s of the collective's
# start (its own measure, in its message), and the job ends within 45 s
# (start-up and MPI_Abort included: make check runs other tests beside this
# one, and under that load the job took 20 s where the watchdog took 3.3)
t0=$(date +%s)
run_nodes 2,2 "$DDPTRAIN" "$T/d.h5" $common --batch 8 --steps 200 --timeout 3 --inject hang:3:5 \
  >"$T/o" 2>"$T/e"
rc=$? dt=$(($(date +%s) - t0))
[ $rc -eq 10 ] || { cat "$T/o" "$T/e"; fail "hang of rank 3 on 2 nodes: exit $rc, expected 10"; }
[ $dt -le 45 ] || { cat "$T/e"; fail "hang of rank 3 on 2 nodes: took $dt s (timeout 3)"; }
sed -n 's/.* has not completed in \([0-9.]*\) s (--timeout 3).*/\1/p' "$T/e" | head -n 1 \
  | awk '{ ok = $1 + 0 >= 3 && $1 + 0 <= 8 } END { exit !(NR == 1 && ok) }' \
  || { cat "$T/e"; fail "hang of rank 3 on 2 nodes: the watchdog did not name the collective within 3-8 s"; }
grep -qE "watchdog: .* at step 5 .*rank 3 \($(simnodes_host 1)\) did not arrive" "$T/e" \
  || { cat "$T/e"; fail "hang on 2 nodes: the report does not name rank 3 on $(simnodes_host 1)"; }
grep -q "cannot reach rank 0's watchdog" "$T/e" && { cat "$T/e"; fail "2 nodes: the watchdog was not reached"; }
echo "hang of rank 3 on node b: exit 10 after $dt s, named"

# bad input across nodes: one error line, exit code 3, no hang
run_nodes 1,1 "$DDPTRAIN" "$T/missing.h5" $common --batch 16 >"$T/o" 2>"$T/e"
rc=$?
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "a missing input hung the 2-node job"
[ $rc -eq 3 ] || { cat "$T/o" "$T/e"; fail "missing input on 2 nodes: exit $rc, expected 3"; }
[ "$(grep -c 'ddptrain: error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "2 nodes: expected one error line"; }

# three nodes, uneven (2,1,1): the ranks land node by node, every node's
# link carries traffic, and 4 ranks match 1 rank with the global batch
simnodes_down
simnodes_up 2,1,1 unlimited ddp || fail "3 nodes: $SIMNODES_WHY"
SIMNODES_TIMEOUT=60 simnodes_mpirun sh -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname)"' >"$T/o" 2>&1 ||
  { cat "$T/o"; fail "3 nodes: mpirun of hostname"; }
want=$(printf '0 %s\n1 %s\n2 %s\n3 %s' "$(simnodes_host 0)" "$(simnodes_host 0)" "$(simnodes_host 1)" "$(simnodes_host 2)")
# (only the ranks' lines: under load mpirun may warn that a setpgid of its
# agent lost the race with the agent's exec)
[ "$(grep '^[0-9][0-9]* ' "$T/o" | sort -n)" = "$want" ] || { cat "$T/o"; fail "layout 2,1,1: ranks not node by node"; }
SIMNODES_TIMEOUT=300 simnodes_mpirun -x OPENBLAS_NUM_THREADS=1 "$DDPTRAIN" "$T/d.h5" $common --batch 8 \
  --check-replicas 1 --save "$T/nodes211.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "4 ranks on 3 nodes (2,1,1)"; }
grep -q "4 ranks on 3 nodes" "$T/o" || { cat "$T/o"; fail "layout 2,1,1: the ranks did not see 3 nodes"; }
"$WEIGHTS_CMP" "$T/nodes211.h5" "$T/one.h5" 1e-5 >"$T/cmp" \
  || { cat "$T/cmp"; fail "4 ranks on 3 nodes (2,1,1) vs 1 rank with the global batch"; }
for i in 0 1 2; do
  [ "$(simnodes_tx $i)" -gt 100000 ] || fail "layout 2,1,1: node $i sent $(simnodes_tx $i) bytes on its link"
done
echo "3 nodes (2,1,1) vs 1 rank: $(tail -n 1 "$T/cmp"); bytes sent per node: $(simnodes_tx 0) $(simnodes_tx 1) $(simnodes_tx 2)"

# 3x1 and 2+1 (uneven): the hierarchical all-reduce, replicas identical
# every step, 3 ranks match 1 rank with the global batch
mpirun_np 1 "$DDPTRAIN" "$T/d.h5" $common --batch 24 --save "$T/one24.h5" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "1 rank, batch 24"; }
for lay in 1,1,1 2,1; do
  if [ $lay = 2,1 ]; then simnodes_down; simnodes_up 2,1 unlimited ddp || fail "2,1: $SIMNODES_WHY"; fi
  simnodes_layout $lay || fail "$SIMNODES_WHY"
  SIMNODES_TIMEOUT=300 simnodes_mpirun -x OPENBLAS_NUM_THREADS=1 "$DDPTRAIN" "$T/d.h5" $common \
    --batch 8 --check-replicas 1 --save "$T/n$lay.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "layout $lay"; }
  grep -q "collectives by algorithm: .*hier [1-9]" "$T/o" \
    || { cat "$T/o"; fail "layout $lay: the gradients did not take the hierarchical all-reduce"; }
  "$WEIGHTS_CMP" "$T/n$lay.h5" "$T/one24.h5" 1e-5 >"$T/cmp" \
    || { cat "$T/cmp"; fail "3 ranks on nodes $lay vs 1 rank with the global batch"; }
  echo "nodes $lay vs 1 rank: $(tail -n 1 "$T/cmp")"
done

# the hierarchy: with 2 ranks per node each node's link carries what it
# carries with 1 (the gradient bytes: a run minus its --no-sync twin), where
# a flat ring over the 4 ranks sends 1.5 times as much
simnodes_down
simnodes_up 1,1 unlimited ddp || fail "2 nodes: $SIMNODES_WHY"
# (the thread off everywhere: with it, TCP sends smaller segments, more
# headers; a fixed bucket cap: auto's link probe sends 20 MB, whose noise
# would swamp the gradients' 1.3 MB)
big="--model linear:512,relu,linear:auto --steps 20 --log-every 0 --eval-every 0 --batch 8 \
  --comm-thread off --bucket-cap-mb 25"
sent() { # sent LAYOUT [ARGS]: bytes node 0 sent during one run
  simnodes_layout "$1" || fail "$SIMNODES_WHY"
  shift
  _b=$(simnodes_tx 0)
  SIMNODES_TIMEOUT=300 simnodes_mpirun -x OPENBLAS_NUM_THREADS=1 "$DDPTRAIN" "$T/d.h5" $big "$@" \
    >"$T/o" 2>&1 || { cat "$T/o"; fail "link bytes run $*"; }
  echo $(($(simnodes_tx 0) - _b))
}
g11=$(($(sent 1,1) - $(sent 1,1 --no-sync)))
g22=$(($(sent 2,2) - $(sent 2,2 --no-sync)))
r22=$(($(sent 2,2 --allreduce ring) - $(sent 2,2 --no-sync)))
awk -v a="$g22" -v b="$g11" -v r="$r22" 'BEGIN { exit !(b > 0 && a < 1.2 * b && r > 1.3 * b) }' \
  || fail "link bytes of node 0: 2x2 hier $g22, 2x1 $g11, 2x2 ring $r22 (hier should be about 2x1's, the ring 1.5x)"
echo "gradient bytes node 0 sent: 2x1 $g11, 2x2 hier $g22, 2x2 ring $r22"
echo ok
