#!/bin/sh
# test_diagnose_report.sh -- ddptrain --diagnose's report is whole and
# consistent, and names a straggler, at 2 ranks on a small deck (the
# verdicts that need an idle machine: test_diagnose.sh):
# - straggler: --inject slow:1:1:50 (rank 1 sleeps 50 ms at the start of
#   every step) -> "verdict: straggler", the next step naming rank 1 and its
#   host; with --metrics the "diagnose" record says the same, and --save
#   is warned about and not written;
# - np=3: busbw = algbw x 4/3; np=1: the communication modes say
#   "n/a (1 rank)".
# Every report: exit 0, a row for every rank and every mode, each row's
# data wait + forward + backward + exposed comm + optimizer <= step and
# compute <= step (to the printed rounding), busbw = algbw x 2(n-1)/n, the
# overlap fraction in [0, 1], one verdict line and one next line.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
export DDP_TEST_TIMEOUT=${DDP_TEST_TIMEOUT:-180}
HOST=$(uname -n)
"$DDPPREP" synthetic --classes 4 --features 16 --samples 2000 --seed 61 -o "$T/small.h5" >/dev/null \
  || fail "ddptrain-prep synthetic (small)"
. "$top_srcdir/tests/e2e/diagnose_lib.sh"

# straggler, with --metrics and an ignored --save
run_diag "$T/strag" 2 straggler "$T/small.h5" --model linear:32,relu,linear:auto --batch 16 \
  --diagnose-steps 20 --inject slow:1:1:50 --metrics "$T/m.jsonl" --save "$T/w.h5"
expect_verdict "$T/strag" straggler straggler
grep -q "^next: rank 1 on host $HOST is [0-9.]* times the median" "$T/strag" \
  || { cat "$T/strag"; fail "straggler: the next step does not name rank 1 on $HOST"; }
grep -q "warning: --diagnose: --save $T/w.h5 is ignored" "$T/strag" \
  || { cat "$T/strag"; fail "straggler: no warning that --save is ignored"; }
[ ! -e "$T/w.h5" ] || fail "--diagnose wrote --save $T/w.h5"
/usr/bin/python3 - "$T/m.jsonl" <<'PY' || fail "the diagnose record of --metrics"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [r["type"] for r in recs] == ["config", "diagnose"], [r["type"] for r in recs]
d = recs[1]
assert d["verdict"] == "straggler" and d["straggler_rank"] == 1, d
assert d["world_size"] == 2 and d["steps"] == 20, d
rows = {(r["rank"], r["mode"]) for r in d["table"]}
assert rows == {(r, m) for r in (0, 1) for m in ("normal", "no-comm", "in-memory")}, rows
for r in d["table"]:
    parts = sum(r[k] for k in ("data_wait_ms", "forward_ms", "backward_ms", "comm_exposed_ms", "optimizer_ms"))
    assert parts <= r["step_ms"] * (1 + 1e-9) and r["compute_ms"] <= r["step_ms"] * (1 + 1e-9), r
assert abs(d["busbw_gbps"] - d["algbw_gbps"]) <= 1e-9 * d["algbw_gbps"], d   # 2(n-1)/n = 1 at n = 2
assert 0 <= d["overlap_fraction"] <= 1 and d["allreduce_bytes"] > 0, d
print("metrics: diagnose record ok")
PY

# np=3: the bus bandwidth factor 4/3; np=1: n/a
run_diag "$T/np3" 3 "np=3" "$T/small.h5" --model linear:256,relu,linear:auto --batch 16 --diagnose-steps 10
run_diag "$T/np1" 1 "np=1" "$T/small.h5" --model linear:32,relu,linear:auto --batch 16 --diagnose-steps 10
echo ok
