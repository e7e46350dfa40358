#!/bin/sh
# test_metrics.sh -- --metrics FILE: at 2 ranks every line is one JSON object
# with "type" first; a "config" record first (world size, hosts, every
# option of --help with its value) and a "summary" record last; a "step"
# record per progress line whose step, loss (to the line's 5 decimals), lr
# and samples/s are the line's, whose step-time split (data wait, forward,
# backward, exposed communication, optimizer) is non-negative and sums to no
# more than the step time, with bytes_reduced > 0 and the step time between
# the ranks' minimum and maximum; grad_norm a number with --clip-grad-norm
# and null without; an "eval" record per eval line with the same numbers.  A
# run resumed with --resume auto appends "config", then "resume" with the
# step it resumed from, and step numbers go on from there.  An --metrics in a
# missing directory stops the job before training (exit 4, one error line),
# a directory or an input deck as --metrics is refused (exit 2, the deck
# unchanged).  Where stderr is not a terminal the output has no status line;
# on a terminal (script -qec) it has one, redrawn in place with the metrics
# file's loss, no plain progress lines, and eval and done lines that start
# lines of their own; with stdout redirected the plain lines go there; none
# with --quiet.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
PY=/usr/bin/python3
"$DDPPREP" synthetic --classes 4 --features 12 --samples 600 --val 100 --seed 3 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
export DDP_TEST_TIMEOUT=${DDP_TEST_TIMEOUT:-120}
"$DDPTRAIN" --help | sed -n 's/^  --\([a-z0-9-]*\).*/\1/p' >"$T/options"

# check.py FILE OUT [clip|noclip] [resumed_at]: the records of FILE against
# the progress and eval lines of OUT (the output of the last run appending)
cat >"$T/check.py" <<'PY'
import json, math, re, sys
path, out, clip = sys.argv[1], sys.argv[2], sys.argv[3] == "clip"
resumed = int(sys.argv[4]) if sys.argv[4] else None
options = [l.strip() for l in open(sys.argv[5])]
bad = []
def check(cond, what):
    if not cond: bad.append(what)
recs = []
for n, line in enumerate(open(path), 1):
    check(line.endswith("\n"), "line %d does not end with a newline" % n)
    r = json.loads(line)   # raises on anything that is not JSON
    check(isinstance(r, dict) and list(r)[0] == "type", "line %d: 'type' is not the first key" % n)
    recs.append(r)
# the records of the last run: from its config record on
last = max(i for i, r in enumerate(recs) if r["type"] == "config")
run = recs[last:]
check(recs[0]["type"] == "config", "the first record is not 'config'")
check(run[-1]["type"] == "summary", "the last record is not 'summary'")
cfg = run[0]
check(cfg["world_size"] == 2 and len(cfg["hosts"]) == 2, "config: world_size/hosts")
for o in options:
    check(o in cfg["options"], "config: option %s missing" % o)
check(cfg["options"]["batch"] == 16 and cfg["options"]["metrics"] == path, "config: batch/metrics values")
if resumed is not None:
    check(run[1]["type"] == "resume" and run[1]["step"] == resumed,
          "no 'resume' record at step %d after the config: %s" % (resumed, run[1]))
    check(sum(r["type"] == "resume" for r in recs) == 1, "expected exactly one 'resume' record")
    check(sum(r["type"] == "config" for r in recs) == 2 and any(r["step"] <= resumed for r in recs if r["type"] == "step"),
          "the first run's records are gone: the resumed run did not append")
else:
    check(all(r["type"] != "resume" for r in recs), "a 'resume' record in a fresh run")
# every step record of the file: step numbers increase across runs
steps = [r for r in recs if r["type"] == "step"]
nums = [r["step"] for r in steps]
check(nums == sorted(set(nums)), "step numbers do not increase: %s" % nums)
if resumed is not None:
    after = [r["step"] for r in run if r["type"] == "step"]
    check(after and min(after) > resumed, "the resumed run's steps do not go on from %d" % resumed)
lines = {}
for l in open(out):
    m = re.match(r"step (\d+)/\d+ epoch (\d+) loss (\S+) lr (\S+)\s+(\d+) samples/s", l)
    if m: lines[int(m.group(1))] = m.groups()
run_steps = [r for r in run if r["type"] == "step"]
check(sorted(lines) == [r["step"] for r in run_steps],
      "step records %s vs progress lines %s" % ([r["step"] for r in run_steps], sorted(lines)))
parts = ("data_wait_ms", "forward_ms", "backward_ms", "comm_exposed_ms", "optimizer_ms")
for r in run_steps:
    s = r["step"]
    if s not in lines: continue
    _, epoch, loss, lr, sps = lines[s]
    check(math.isfinite(r["loss"]) and "%.5f" % r["loss"] == loss, "step %d: loss %r vs line %s" % (s, r["loss"], loss))
    check("%.4g" % r["lr"] == lr and str(r["epoch"]) == epoch, "step %d: lr/epoch" % s)
    check(r["samples_per_s"] > 0 and "%.0f" % r["samples_per_s"] == sps, "step %d: samples/s %r vs %s" % (s, r["samples_per_s"], sps))
    check(all(r[k] >= 0 for k in parts), "step %d: a negative phase time: %s" % (s, r))
    check(sum(r[k] for k in parts) <= r["step_ms"] * (1 + 1e-9), "step %d: phases sum to more than step_ms: %s" % (s, r))
    check(r["step_ms_min"] <= r["step_ms"] * (1 + 1e-12) and r["step_ms"] <= r["step_ms_max"] * (1 + 1e-12), "step %d: step_ms outside min..max" % s)
    check(r["step_ms_min_rank"] in (0, 1) and r["step_ms_max_rank"] in (0, 1), "step %d: ranks" % s)
    check(r["bytes_reduced"] > 0 and r["samples"] > 0 and r["steps"] > 0, "step %d: bytes/samples/steps" % s)
    if clip:
        check(isinstance(r["grad_norm"], float) and r["grad_norm"] > 0, "step %d: grad_norm %r" % (s, r["grad_norm"]))
    else:
        check(r["grad_norm"] is None, "step %d: grad_norm %r without clipping" % (s, r["grad_norm"]))
evals = [l.strip() for l in open(out) if l.startswith("eval ")]
mine = ["eval epoch=%d step=%d val_loss=%.6f val_acc=%.6f samples=%d"
        % (r["epoch"], r["step"], r["val_loss"], r["val_acc"], r["samples"]) for r in run if r["type"] == "eval"]
check(evals == mine and evals, "eval records %s vs eval lines %s" % (mine, evals))
summ = run[-1]
done = re.search(r"^done: (\d+) steps, (\d+) samples", open(out).read(), re.M)
check(done and summ["steps"] == int(done.group(1)) and summ["samples"] == int(done.group(2)),
      "summary steps/samples vs the done line")
check(summ["grad_bytes"] > 0 and summ["samples_per_s"] > 0, "summary: grad_bytes/samples_per_s")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY

# 2 ranks, 2 epochs of 18 steps, a progress line every 4 steps, evaluations
# at step 18 and 36, clipping (a gradient norm to report)
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" --model linear:16,bn,relu,linear:auto --batch 16 --epochs 2 \
  --log-every 4 --clip-grad-norm 10 --metrics "$T/a.jsonl" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "2 ranks with --metrics"; }
$PY "$T/check.py" "$T/a.jsonl" "$T/o" clip "" "$T/options" 2>&1 \
  || { cat "$T/o" "$T/a.jsonl"; fail "the metrics of a 2-rank run"; }
echo "2 ranks: $(wc -l <"$T/a.jsonl") records"

# requeue: --resume auto appends, the steps go on from the checkpoint
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" --model linear:16,bn,relu,linear:auto --batch 16 --steps 10 \
  --log-every 5 --ckpt-dir "$T/ck" --resume auto --metrics "$T/b.jsonl" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "first run with --ckpt-dir"; }
$PY "$T/check.py" "$T/b.jsonl" "$T/o" noclip "" "$T/options" || { cat "$T/o" "$T/b.jsonl"; fail "first run's metrics"; }
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" --model linear:16,bn,relu,linear:auto --batch 16 --steps 20 \
  --log-every 5 --ckpt-dir "$T/ck" --resume auto --metrics "$T/b.jsonl" >"$T/o" 2>&1 \
  || { cat "$T/o"; fail "resumed run"; }
grep -q "resume .*ckpt_00000010.h5: step 10," "$T/o" || { cat "$T/o"; fail "the second run did not resume at step 10"; }
$PY "$T/check.py" "$T/b.jsonl" "$T/o" noclip 10 "$T/options" || { cat "$T/o" "$T/b.jsonl"; fail "resumed run's metrics"; }
echo "resumed at step 10: $(grep -c '"type":"step"' "$T/b.jsonl") step records in all"

# no status line where stderr is not a terminal: the output as before
grep -q "$(printf '\r')" "$T/o" && fail "a carriage return in the output of a run without a terminal"
grep -q "ETA" "$T/o" && fail "a status line in the output of a run without a terminal"

# on a terminal (script(1) gives the run a pseudo-terminal): one status line
# redrawn with \r and cleared to its end, no plain progress lines, every
# other line (eval, done) on a line of its own; its last loss is the metrics
# file's; with stdout redirected the plain lines go there
if command -v script >/dev/null 2>&1; then
  script -qec "$DDPTRAIN $T/d.h5 --model linear:16,bn,relu,linear:auto --batch 32 --epochs 2 \
    --log-every 4 --metrics $T/c.jsonl" "$T/tty" >/dev/null 2>&1 || { cat "$T/tty"; fail "run on a terminal"; }
  cat >"$T/tty.py" <<'PY'
import json, re, sys
raw = open(sys.argv[1], "rb").read().decode()
recs = [json.loads(l) for l in open(sys.argv[2])]
bad = []
if "\x1b[K" not in raw or not re.search(r"\repoch 2/2  step 36/36  loss [0-9.]+  [0-9]+ samples/s  ETA ", raw):
    bad.append("no status line redrawn with \\r and clear-to-end reaching step 36/36")
if re.search(r"(^|[\r\n])step \d+/\d+ epoch", raw):
    bad.append("plain progress lines on the terminal")
for key in ("eval epoch=", "done: "):
    for m in re.finditer(re.escape(key), raw):
        if m.start() > 0 and raw[m.start() - 1] != "\n":
            bad.append("%r does not start a line: ...%r" % (key, raw[max(0, m.start() - 40):m.start() + 12]))
last = re.findall(r"step 36/36  loss ([0-9.]+)", raw)[-1]
want = "%.5f" % [r for r in recs if r["type"] == "step"][-1]["loss"]
if last != want: bad.append("status loss %s, metrics file %s" % (last, want))
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
  $PY "$T/tty.py" "$T/tty" "$T/c.jsonl" || { cat -A "$T/tty" | head -20; fail "the status line on a terminal"; }
  script -qec "$DDPTRAIN $T/d.h5 --steps 8 --log-every 4 --eval-every 0 >$T/plain" "$T/tty2" >/dev/null 2>&1 \
    || { cat "$T/tty2"; fail "run on a terminal, stdout redirected"; }
  [ "$(grep -c '^step [48]/8 epoch' "$T/plain")" -eq 2 ] || { cat "$T/plain"; fail "stdout redirected: no plain lines there"; }
  grep -q "ETA" "$T/tty2" || { cat -A "$T/tty2"; fail "stdout redirected: no status line on the terminal"; }
  script -qec "$DDPTRAIN $T/d.h5 --steps 8 --log-every 4 --quiet" "$T/tty3" >/dev/null 2>&1 \
    || { cat "$T/tty3"; fail "run on a terminal with --quiet"; }
  grep -q "ETA" "$T/tty3" && { cat -A "$T/tty3"; fail "--quiet: a status line"; }
  echo "terminal: status line $(grep -o 'ETA' "$T/tty" | wc -l) times redrawn"
else
  echo "no script(1): the status line on a terminal is not tested here (check_metrics tests its text)"
fi

# an --metrics that cannot be opened: exit 4 before training, one line
"$DDPTRAIN" "$T/d.h5" --steps 5 --log-every 1 --metrics "$T/no/such/dir/m.jsonl" >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 4 ] || { cat "$T/o" "$T/e"; fail "--metrics in a missing directory: exit $rc, expected 4"; }
grep -q "^step " "$T/o" && fail "--metrics in a missing directory: trained before failing"
[ "$(wc -l <"$T/e")" -eq 1 ] || { cat "$T/e"; fail "--metrics in a missing directory: not one line"; }
grep -q "^ddptrain: error: --metrics $T/no/such/dir/m.jsonl: cannot open it for appending" "$T/e" \
  || { cat "$T/e"; fail "--metrics message"; }
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" --steps 5 --metrics "$T/no/m.jsonl" >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 4 ] || { cat "$T/o" "$T/e"; fail "--metrics in a missing directory at 2 ranks: exit $rc"; }
[ "$(grep -c 'error' "$T/e")" -eq 1 ] || { cat "$T/e"; fail "2 ranks: not one error line"; }
# a directory, the input deck: exit 2, nothing appended
"$DDPTRAIN" "$T/d.h5" --steps 5 --metrics "$T" >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 2 ] || { cat "$T/e"; fail "--metrics naming a directory: exit $rc, expected 2"; }
grep -q "is a directory, not a regular file" "$T/e" || { cat "$T/e"; fail "--metrics directory message"; }
sum=$(cksum <"$T/d.h5")
"$DDPTRAIN" "$T/d.h5" --steps 5 --metrics "$T/d.h5" >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 2 ] || { cat "$T/e"; fail "--metrics naming the input deck: exit $rc, expected 2"; }
[ "$(cksum <"$T/d.h5")" = "$sum" ] || fail "--metrics naming the input deck changed it"
echo ok
