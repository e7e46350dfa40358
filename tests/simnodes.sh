# simnodes.sh -- a cluster of nodes simulated on this machine, for the tests
# and the benchmarks (sourced, not run; plain POSIX sh).
#
# Every node is a network namespace with one interface (eth0, address
# NET.(i+1)/24) joined to the others through a bridge in a namespace of its
# own (the switch), so any number of nodes works; an optional link rate
# limits each node's link both ways with tc tbf (what the node sends on eth0,
# and what the switch sends to it).  mpirun runs inside node 0 with that
# node's hostname (unshare --uts), and its remote-shell agent is replaced by
# a script that starts Open MPI's daemon of host NET.(i+1) inside node i's
# namespace with node i's hostname: Open MPI sees N hosts, ranks on
# different nodes talk over TCP through the switch, ranks on one node over
# shared memory.  Ranks land node by node: ranks 0..k0-1 on node 0, the next
# k1 on node 1, and so on.
#
#   simnodes_check [RATE]   0 when nodes can be made here (and, with a RATE
#                           other than unlimited, limited with tc); else 1
#                           with the reason in SIMNODES_WHY
#   simnodes_up LAYOUT [RATE] [TAG]
#                           make the nodes: LAYOUT is the ranks of each node,
#                           comma-separated (2,2 = 2 nodes x 2 ranks; 2,1 is
#                           uneven); RATE a tc rate (100mbit, 1gbit, 10gbit,
#                           100gbit) or unlimited (the default); TAG (letters,
#                           default "sim") begins the names of the
#                           namespaces and hosts.  0, or 1 with SIMNODES_WHY
#                           (whatever was made is removed).  Sets SIMNODES_N
#                           (nodes), SIMNODES_NP (ranks), SIMNODES_NET (the
#                           /24 without its last number) and SIMNODES_HOSTFILE.
#   simnodes_layout LAYOUT  other ranks per node on the same nodes (as many
#                           numbers as nodes): rewrites the hostfile and
#                           SIMNODES_NP; 0, or 1 with SIMNODES_WHY
#   simnodes_mpirun [MPIRUN OPTIONS] PROGRAM ARGS...
#                           mpirun with the hostfile, -np SIMNODES_NP, under
#                           a timeout of SIMNODES_TIMEOUT seconds (default
#                           600); its exit status
#   simnodes_host I         the hostname of node I (0-based)
#   simnodes_tx I, simnodes_rx I
#                           the bytes node I has sent (received) on its link
#                           since simnodes_up (the interface's tx_bytes and
#                           rx_bytes: TCP/IP headers and all)
#   simnodes_down           remove the namespaces and files; call it from the
#                           caller's EXIT trap (simnodes_up sets no trap)
#
# Needs root (namespaces), ip (iproute2), unshare (util-linux), Open MPI's
# mpirun ($MPIEXEC, else mpirun on PATH) and, for a rate, tc (iproute2).
# The names: namespaces TAG<id>h (the switch) and TAG<id>n0, TAG<id>n1, ...;
# hosts TAGnode<id>a, TAGnode<id>b, ... (id: from the shell's pid, the first
# free one).

SIMNODES_N=0 SIMNODES_NP=0 SIMNODES_WHY="" SIMNODES_DIR="" SIMNODES_ID="" SIMNODES_TAG=""
SIMNODES_NET="" SIMNODES_HOSTFILE="" SIMNODES_RATE=""

simnodes_mpiexec_() { echo "${MPIEXEC:-mpirun}"; }

# simnodes_rate_bits_ RATE: a tc rate in bit/s (integer), or nothing when it
# is not one
simnodes_rate_bits_() {
  echo "$1" | awk '{ r = tolower($0)
    if (!match(r, /^[0-9]+(\.[0-9]+)?/)) exit
    v = substr(r, 1, RLENGTH); u = substr(r, RLENGTH + 1)
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9; m["tbit"] = 1e12
    m["bps"] = 8; m["kbps"] = 8e3; m["mbps"] = 8e6; m["gbps"] = 8e9
    if (!(u in m)) exit
    printf "%.0f\n", v * m[u] }'
}

simnodes_check() {
  SIMNODES_WHY=""
  [ "$(id -u)" = 0 ] || { SIMNODES_WHY="network namespaces need root"; return 1; }
  for _p in ip unshare; do
    command -v "$_p" >/dev/null 2>&1 ||
      { SIMNODES_WHY="$_p not installed (scripts/install-deps installs it)"; return 1; }
  done
  case ${1:-unlimited} in
    unlimited) ;;
    *) command -v tc >/dev/null 2>&1 ||
         { SIMNODES_WHY="tc not installed (iproute2; scripts/install-deps installs it)"; return 1; } ;;
  esac
  $(simnodes_mpiexec_) --version 2>&1 | grep -q "Open MPI" ||
    { SIMNODES_WHY="the node simulation drives Open MPI's mpirun"; return 1; }
  return 0
}

# simnodes_letter_ I: a, b, ..., z for 0..25
simnodes_letter_() { echo "$1" | awk '{ printf "%c\n", 97 + $1 }'; }
simnodes_host() { echo "${SIMNODES_TAG}node${SIMNODES_ID}$(simnodes_letter_ "$1")"; }
simnodes_ns_() { echo "${SIMNODES_TAG}${SIMNODES_ID}n$1"; }

# simnodes_parse_ LAYOUT: _nodes and _ranks of LAYOUT, or 1 with SIMNODES_WHY
simnodes_parse_() {
  case $1 in
    "" | ,* | *, | *,,* | *[!0-9,]*) SIMNODES_WHY="layout '$1': ranks per node, comma-separated (e.g. 2,2)"; return 1 ;;
  esac
  _nodes=0 _ranks=0
  for _k in $(echo "$1" | tr , ' '); do
    [ "$_k" -ge 1 ] 2>/dev/null && [ "$_k" -le 64 ] ||
      { SIMNODES_WHY="layout '$1': $_k ranks on a node (1 to 64)"; return 1; }
    _nodes=$((_nodes + 1)) _ranks=$((_ranks + _k))
  done
  [ "$_nodes" -le 26 ] || { SIMNODES_WHY="layout '$1': more than 26 nodes"; return 1; }
}

# simnodes_hostfile_ LAYOUT: the hostfile, one line per node with its slots
simnodes_hostfile_() {
  _i=0
  for _k in $(echo "$1" | tr , ' '); do
    echo "$SIMNODES_NET.$((_i + 1)) slots=$_k"
    _i=$((_i + 1))
  done >"$SIMNODES_HOSTFILE"
}

simnodes_layout() {
  simnodes_parse_ "$1" || return 1
  [ "$_nodes" = "$SIMNODES_N" ] ||
    { SIMNODES_WHY="layout '$1': $_nodes nodes, these are $SIMNODES_N"; return 1; }
  simnodes_hostfile_ "$1"
  SIMNODES_NP=$_ranks
}

simnodes_fail_() { SIMNODES_WHY=$1; simnodes_down; return 1; }

simnodes_up() {
  _layout=$1 _rate=${2:-unlimited} SIMNODES_TAG=${3:-sim}
  simnodes_check "$_rate" || return 1
  case $SIMNODES_TAG in *[!a-z]* | "") SIMNODES_WHY="simnodes_up: TAG '$SIMNODES_TAG': lowercase letters only"; return 1 ;; esac
  [ ${#SIMNODES_TAG} -le 6 ] || { SIMNODES_WHY="simnodes_up: TAG '$SIMNODES_TAG': at most 6 letters"; return 1; }
  simnodes_parse_ "$_layout" || return 1
  SIMNODES_N=$_nodes SIMNODES_NP=$_ranks
  SIMNODES_RATE="" _burst=""
  if [ "$_rate" != unlimited ]; then
    _bits=$(simnodes_rate_bits_ "$_rate")
    [ -n "$_bits" ] && [ "$_bits" -gt 0 ] ||
      { SIMNODES_WHY="link rate '$_rate': a tc rate such as 100mbit, 10gbit, or unlimited"; return 1; }
    # the bucket: 256 KiB, or 1 ms of the rate when that is more (at 100
    # Gbit/s tbf's timer could not keep up with a smaller one)
    _burst=$(awk -v b="$_bits" 'BEGIN { x = b / 8 / 1000; printf "%.0f\n", (x > 262144) ? x : 262144 }')
    SIMNODES_RATE=$_rate
  fi
  # a free id: the first whose switch namespace we could create
  SIMNODES_ID=$(($$ % 200 + 20)) _tries=0
  until ip netns add "${SIMNODES_TAG}${SIMNODES_ID}h" 2>/dev/null; do
    _tries=$((_tries + 1))
    [ $_tries -lt 40 ] || { SIMNODES_ID=""; SIMNODES_WHY="cannot create network namespaces here"; return 1; }
    SIMNODES_ID=$(((SIMNODES_ID - 19) % 200 + 20))
  done
  SIMNODES_DIR=$(mktemp -d "${TMPDIR:-/tmp}/simnodes.XXXXXX") ||
    simnodes_fail_ "cannot make a temporary directory" || return 1
  SIMNODES_NET="10.${SIMNODES_ID}.$((SIMNODES_ID % 7 + 80))"
  _sw="${SIMNODES_TAG}${SIMNODES_ID}h"
  ip -n "$_sw" link add br0 type bridge && ip -n "$_sw" link set br0 up ||
    simnodes_fail_ "cannot create a bridge in a network namespace here" || return 1
  SIMNODES_HOSTFILE=$SIMNODES_DIR/hostfile
  simnodes_hostfile_ "$_layout"
  {
    echo '#!/bin/sh'
    echo '# the remote-shell agent of mpirun: start the command on host $1 in its node'
    echo 'host=$1; shift'
    echo 'case "$host" in'
  } >"$SIMNODES_DIR/agent"
  _i=0
  for _k in $(echo "$_layout" | tr , ' '); do
    _ns=$(simnodes_ns_ $_i) _ip="$SIMNODES_NET.$((_i + 1))"
    ip netns add "$_ns" \
      && ip -n "$_sw" link add "p$_i" type veth peer name eth0 netns "$_ns" \
      && ip -n "$_sw" link set "p$_i" master br0 && ip -n "$_sw" link set "p$_i" up \
      && ip -n "$_ns" addr add "$_ip/24" dev eth0 \
      && ip -n "$_ns" link set eth0 up && ip -n "$_ns" link set lo up ||
      simnodes_fail_ "cannot create network namespaces and veth pairs here" || return 1
    if [ -n "$SIMNODES_RATE" ]; then
      ip netns exec "$_ns" tc qdisc add dev eth0 root tbf rate "$_rate" burst "$_burst" latency 50ms \
        && ip netns exec "$_sw" tc qdisc add dev "p$_i" root tbf rate "$_rate" burst "$_burst" latency 50ms ||
        simnodes_fail_ "tc tbf rate $_rate does not work here" || return 1
    fi
    echo "  $_ip) ns=$_ns; hn=$(simnodes_host $_i) ;;" >>"$SIMNODES_DIR/agent"
    _i=$((_i + 1))
  done
  {
    echo '  *) echo "simnodes agent: unknown host $host" >&2; exit 1 ;;'
    echo 'esac'
    echo 'exec ip netns exec "$ns" unshare --uts sh -c "hostname $hn; $*"'
  } >>"$SIMNODES_DIR/agent"
  chmod +x "$SIMNODES_DIR/agent"
  # the counters start at the links' first packets (IPv6 neighbour
  # discovery and the like): remember them
  _i=0
  : >"$SIMNODES_DIR/base"
  while [ $_i -lt "$SIMNODES_N" ]; do
    echo "$_i $(simnodes_stat_ $_i tx_bytes) $(simnodes_stat_ $_i rx_bytes)" >>"$SIMNODES_DIR/base"
    _i=$((_i + 1))
  done
  return 0
}

simnodes_stat_() { ip netns exec "$(simnodes_ns_ "$1")" cat "/sys/class/net/eth0/statistics/$2"; }
simnodes_tx() { echo $(($(simnodes_stat_ "$1" tx_bytes) - $(awk -v i="$1" '$1 == i { print $2 }' "$SIMNODES_DIR/base"))); }
simnodes_rx() { echo $(($(simnodes_stat_ "$1" rx_bytes) - $(awk -v i="$1" '$1 == i { print $3 }' "$SIMNODES_DIR/base"))); }

simnodes_mpirun() {
  _root=""
  [ "$(id -u)" = 0 ] && _root=--allow-run-as-root
  timeout -k 10 "${SIMNODES_TIMEOUT:-600}" \
    ip netns exec "$(simnodes_ns_ 0)" unshare --uts sh -c "hostname $(simnodes_host 0); exec \"\$@\"" sh \
    $(simnodes_mpiexec_) $_root --oversubscribe --bind-to none --hostfile "$SIMNODES_HOSTFILE" \
    -np "$SIMNODES_NP" --map-by slot --mca plm_rsh_agent "$SIMNODES_DIR/agent" \
    --mca plm_rsh_no_tree_spawn 1 --mca btl self,vader,tcp \
    --mca btl_tcp_if_include "$SIMNODES_NET.0/24" --mca oob_tcp_if_include "$SIMNODES_NET.0/24" \
    -x OMPI_MCA_btl_vader_single_copy_mechanism=none "$@"
}

simnodes_down() {
  if [ -n "$SIMNODES_ID" ]; then
    _i=0
    while [ $_i -lt "$SIMNODES_N" ]; do
      ip netns del "$(simnodes_ns_ $_i)" 2>/dev/null || true
      _i=$((_i + 1))
    done
    ip netns del "${SIMNODES_TAG}${SIMNODES_ID}h" 2>/dev/null || true
    SIMNODES_ID=""
  fi
  [ -z "$SIMNODES_DIR" ] || rm -rf "$SIMNODES_DIR"
  SIMNODES_DIR=""
  return 0
}
