#!/bin/sh
# test_plot.sh -- ddptrain-plot: PNGs of real metrics files (a 2-rank run
# with evaluations; a run resumed with --resume auto, so its file holds two
# "config" records; both overlaid) at the size asked for, and the data that
# gnuplot was given (--keep-data) equal to the records of the files: every
# step and eval record, null as missing ("?"), never 0, the records past a
# resume point replaced, the mean step-time split per run.  --scaling on a
# hand-written results.csv: the efficiencies, a case without a 1-rank row
# skipped with a warning; on bench_cluster.sh's rows the efficiencies
# against the link rate, and both panels for both kinds of rows.  Errors,
# each one line, a set exit code and the output left as it was (no
# temporary file left beside it): a missing file, a malformed line and a
# cut-short last line (FILE:LINE), no step records, an output in a missing
# directory, gnuplot not on PATH, a gnuplot that fails or writes no PNG, a
# bad CSV header or row (a cluster row without @RATE, a bad rate or
# efficiency, two rows for one rate), no usable CSV rows.
# Without gnuplot the test is skipped, or fails with DDP_REQUIRE_PLOT=1.
# KEEP_PLOTS=DIR copies the PNGs into DIR, for a look.
. ./testenv.sh || exit 99
set -u
command -v gnuplot >/dev/null 2>&1 || ddp_skip DDP_REQUIRE_PLOT "gnuplot is not installed (apt-get install gnuplot-nox)"
ddp_tmpdir
[ -n "${KEEP_PLOTS:-}" ] && trap 'cp "$T"/*.png "$KEEP_PLOTS"/; rm -rf "$T"' EXIT
PY=/usr/bin/python3
export DDP_TEST_TIMEOUT=${DDP_TEST_TIMEOUT:-120}
"$DDPPREP" synthetic --classes 4 --features 12 --samples 600 --val 100 --seed 3 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
"$DDPPREP" synthetic --classes 4 --features 12 --samples 600 --seed 4 -o "$T/noval.h5" \
  >/dev/null || fail "ddptrain-prep synthetic without /val"

# two real metrics files: a.jsonl with evaluations (epochs 1 and 2), b.jsonl
# of a run stopped at step 10 and resumed to 20 (a deck without /val: no
# evaluation)
mpirun_np 2 "$DDPTRAIN" "$T/d.h5" --model linear:16,bn,relu,linear:auto --batch 16 --epochs 2 \
  --log-every 4 --metrics "$T/a.jsonl" >"$T/o" 2>&1 || { cat "$T/o"; fail "run a"; }
for n in 10 20; do
  mpirun_np 2 "$DDPTRAIN" "$T/noval.h5" --model linear:16,bn,relu,linear:auto --batch 16 --steps $n \
    --log-every 3 --ckpt-dir "$T/ck" --resume auto --metrics "$T/b.jsonl" \
    >"$T/o" 2>&1 || { cat "$T/o"; fail "run b to step $n"; }
done
[ "$(grep -c '"type":"config"' "$T/b.jsonl")" -eq 2 ] && grep -q '"type":"resume"' "$T/b.jsonl" \
  || { cat "$T/b.jsonl"; fail "b.jsonl is not a resumed run's file"; }
grep -q '"type":"eval"' "$T/a.jsonl" || fail "a.jsonl has no eval records"
grep -q '"type":"eval"' "$T/b.jsonl" && fail "b.jsonl has eval records"

# png.py FILE W H: a whole PNG (signature, IHDR first, IEND last) of W x H
cat >"$T/png.py" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
w, h = int(sys.argv[2]), int(sys.argv[3])
assert data[:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature"
pos, chunks = 8, []
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
    assert zlib.crc32(kind + body) == crc, "bad CRC in chunk %r" % kind
    chunks.append((kind, body))
    pos += 12 + n
assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND", "IHDR/IEND missing"
size = struct.unpack(">II", chunks[0][1][:8])
assert size == (w, h), "size %dx%d, expected %dx%d" % (size + (w, h))
PY

# data.py DIR FILE...: the data files of --keep-data DIR against the files'
# records (run<i> is the i-th file)
cat >"$T/data.py" <<'PY'
import json, math, sys
d, files = sys.argv[1], sys.argv[2:]
PH = ["data_wait_ms", "forward_ms", "backward_ms", "comm_exposed_ms", "optimizer_ms"]
bad = []
def rows(path):
    return [l.split() for l in open(path) if not l.startswith("#") and l.strip()]
def same(cell, want, what):
    if want is None:
        if cell != "?": bad.append("%s: %r, expected ? (null)" % (what, cell))
    elif cell == "?" or float(cell) != float(want):
        bad.append("%s: %r, expected %r" % (what, cell, want))
bars = {}
for i, path in enumerate(files, 1):
    steps, evals = [], []
    for r in map(json.loads, open(path)):
        if r["type"] == "resume":
            steps = [s for s in steps if s["step"] <= r["step"]]
            evals = [e for e in evals if e["step"] <= r["step"]]
        elif r["type"] == "step": steps.append(r)
        elif r["type"] == "eval": evals.append(r)
    got = rows("%s/run%d.dat" % (d, i))
    if len(got) != len(steps):
        bad.append("run%d.dat: %d rows, %s has %d step records" % (i, len(got), path, len(steps)))
    for g, r in zip(got, steps):
        w = "run%d.dat step %d" % (i, r["step"])
        if int(g[0]) != r["step"]: bad.append("%s: step column %s" % (w, g[0]))
        for c, k in enumerate(["loss", "samples_per_s", "step_ms"] + PH + ["steps"], 1):
            same(g[c], r.get(k), "%s %s" % (w, k))
    got = rows("%s/run%d.eval.dat" % (d, i))
    if [int(g[0]) for g in got] != [e["step"] for e in evals]:
        bad.append("run%d.eval.dat steps %s, expected %s" % (i, [g[0] for g in got], [e["step"] for e in evals]))
    for g, e in zip(got, evals):
        same(g[1], e["val_acc"], "run%d.eval.dat step %d val_acc" % (i, e["step"]))
    full = [s for s in steps if all(s.get(k) is not None for k in PH + ["step_ms"])]
    if full:
        wt = [s["steps"] or 1 for s in full]
        mean = [sum(x * s[k] for x, s in zip(wt, full)) / sum(wt) for k in PH]
        mean.append(sum(x * max(0.0, s["step_ms"] - sum(s[k] for k in PH)) for x, s in zip(wt, full)) / sum(wt))
        bars[path.rsplit("/", 1)[-1]] = (len(full), mean)
got = {}
for l in open(d + "/phases.dat"):
    if l.startswith("#"): continue
    name, rest = l[1:].split('" ', 1)
    got[name] = rest.split()
if sorted(got) != sorted(bars): bad.append("phases.dat runs %s, expected %s" % (sorted(got), sorted(bars)))
for name, (n, mean) in bars.items():
    g = got.get(name)
    if not g: continue
    if int(g[0]) != n: bad.append("phases.dat %s: %s records, expected %d" % (name, g[0], n))
    for k, (c, m) in enumerate(zip(g[1:], mean)):
        if abs(float(c) - m) > 1e-9 * max(1.0, abs(m)): bad.append("phases.dat %s column %d: %s, expected %r" % (name, k, c, m))
for b in bad[:20]: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY

# plot IN... -o OUT [options]: run ddptrain-plot, which must succeed quietly
plot() {
  "$DDPPLOT" "$@" >"$T/po" 2>"$T/pe" || { cat "$T/po" "$T/pe"; fail "ddptrain-plot $*"; }
}

# 1. each file alone, and both overlaid; the data checked every time
plot "$T/a.jsonl" -o "$T/a.png" --size 640x480 --keep-data "$T/ka"
$PY "$T/png.py" "$T/a.png" 640 480 || fail "a.png is not a 640x480 PNG"
$PY "$T/data.py" "$T/ka" "$T/a.jsonl" || fail "the data of a.png"
grep -q "a.jsonl" "$T/ka/plot.gp" || fail "a.png: no legend a.jsonl in the script"
grep -q "no evaluation" "$T/ka/plot.gp" && fail "a.png: 'no evaluation' although a.jsonl has eval records"
plot "$T/b.jsonl" -o "$T/b.png" --keep-data "$T/kb" --title "resumed run"
$PY "$T/png.py" "$T/b.png" 1200 900 || fail "b.png is not a 1200x900 PNG"
$PY "$T/data.py" "$T/kb" "$T/b.jsonl" || fail "the data of b.png"
grep -q "no evaluation records" "$T/kb/plot.gp" || fail "b.png: the eval panel does not say 'no evaluation records'"
[ "$(head -n 1 "$T/kb/run1.dat" | grep -c '2 config, 1 resume')" -eq 1 ] || { head -n 1 "$T/kb/run1.dat"; fail "b: not read as 2 configs and a resume"; }
[ "$(grep -vc '^#' "$T/kb/run1.dat")" -eq "$(grep -c '"type":"step"' "$T/b.jsonl")" ] || fail "b: not every step record plotted"
plot "$T/a.jsonl" "$T/b.jsonl" -o "$T/ab.png" --keep-data "$T/kab"
$PY "$T/png.py" "$T/ab.png" 1200 900 || fail "ab.png is not a 1200x900 PNG"
$PY "$T/data.py" "$T/kab" "$T/a.jsonl" "$T/b.jsonl" || fail "the data of the overlay"
for n in a.jsonl b.jsonl; do grep -q "title '$n'" "$T/kab/plot.gp" || fail "overlay: no legend $n"; done
# a name with a quote and a blank, in a directory with one, is a legend
mkdir "$T/a \"dir\""
cp "$T/b.jsonl" "$T/a \"dir\"/it's b.jsonl"
plot "$T/a.jsonl" "$T/a \"dir\"/it's b.jsonl" -o "$T/a \"dir\"/q.png" --keep-data "$T/kq"
$PY "$T/png.py" "$T/a \"dir\"/q.png" 1200 900 || fail "q.png"
grep -q "title 'it''s b.jsonl'" "$T/kq/plot.gp" || fail "the legend of it's b.jsonl"
# without --keep-data nothing is left behind in TMPDIR
mkdir "$T/tmp"
TMPDIR="$T/tmp" plot "$T/a.jsonl" "$T/b.jsonl" -o "$T/ab2.png"
[ -z "$(ls "$T/tmp")" ] || { ls -R "$T/tmp"; fail "files left in TMPDIR"; }
cmp -s "$T/ab.png" "$T/ab2.png" || echo "note: ab.png and ab2.png differ (gnuplot timestamps?)"

# 2. a hand-written history: null loss and samples/s, a null phase, null
# val_acc, and a resume at step 4 after records to step 6 (5 and 6 are
# done again by the resumed run)
cat >"$T/h.jsonl" <<'EOF2'
{"type":"config","options":{"model":"x","list":[1,2,{"a":null}]},"hosts":["n1","n2"]}
{"type":"step","step":2,"loss":1.5,"samples_per_s":100.25,"steps":2,"step_ms":10,"data_wait_ms":1,"forward_ms":2,"backward_ms":3,"comm_exposed_ms":1,"optimizer_ms":0.5}
{"type":"step","step":4,"loss":null,"samples_per_s":null,"steps":2,"step_ms":12,"data_wait_ms":1,"forward_ms":2,"backward_ms":null,"comm_exposed_ms":1,"optimizer_ms":0.5}
{"type":"eval","epoch":1,"step":4,"val_loss":0.9,"val_acc":null,"samples":10}
{"type":"step","step":6,"loss":9.0,"samples_per_s":50,"steps":2,"step_ms":20,"data_wait_ms":1,"forward_ms":2,"backward_ms":3,"comm_exposed_ms":1,"optimizer_ms":0.5}
{"type":"eval","epoch":1,"step":6,"val_loss":0.9,"val_acc":0.25,"samples":10}
{"type":"config","options":{"model":"x \"quoted\" \u00e9"}}
{"type":"resume","step":4,"epoch":1,"sample_in_epoch":8,"checkpoint":"c.h5","world_size_at_save":2,"time":"t"}
{"type":"step","step":6,"loss":1.25,"samples_per_s":0,"steps":1,"step_ms":8,"data_wait_ms":0,"forward_ms":2,"backward_ms":3,"comm_exposed_ms":1,"optimizer_ms":0.5}
{"type":"step","step":8,"loss":1.0,"samples_per_s":120,"steps":2,"step_ms":9,"data_wait_ms":1,"forward_ms":2,"backward_ms":3,"comm_exposed_ms":1,"optimizer_ms":0.5}
{"type":"summary","steps":4}
EOF2
plot "$T/h.jsonl" -o "$T/h.png" --keep-data "$T/kh"
$PY "$T/png.py" "$T/h.png" 1200 900 || fail "h.png"
$PY "$T/data.py" "$T/kh" "$T/h.jsonl" || { cat "$T/kh/run1.dat"; fail "the data of the hand-written history"; }
[ "$(grep -v '^#' "$T/kh/run1.dat" | cut -d' ' -f1 | tr '\n' ' ')" = "2 4 6 8 " ] \
  || { cat "$T/kh/run1.dat"; fail "h: the steps past the resume point were not replaced"; }
grep -q "^4 ? ? 12 1 2 ? 1 0.5 2$" "$T/kh/run1.dat" || { cat "$T/kh/run1.dat"; fail "h: nulls not written as missing"; }
[ "$(grep -v '^#' "$T/kh/run1.eval.dat" | cut -d' ' -f1,2 | tr '\n' ' ')" = "4 ? " ] \
  || { cat "$T/kh/run1.eval.dat"; fail "h: the superseded eval at step 6 kept, or the null val_acc not missing"; }

# 3. --scaling: efficiency = median at N / (N x median at 1)
cat >"$T/r.csv" <<'EOF2'
case,implementation,ranks,metric,min,median,max,unit
mlp,ddptrain,1,samples_per_s,9000,10000,11000,samples/s
mlp,ddptrain,2,samples_per_s,16000,16700,17000,samples/s
mlp,ddptrain,2,step_ms,1,2,3,ms
mlp,ddptrain,4,samples_per_s,30000,32000,33000,samples/s
mlp,torch,2,samples_per_s,1,6000,7000,samples/s
cnn,ddptrain,2,samples_per_s,3000,3500,3600,samples/s
cnn,ddptrain,1,samples_per_s,1900,2000,2100,samples/s
EOF2
"$DDPPLOT" --scaling "$T/r.csv" -o "$T/s.png" --keep-data "$T/ks" --size 800x600 >"$T/po" 2>"$T/pe" \
  || { cat "$T/pe"; fail "--scaling"; }
$PY "$T/png.py" "$T/s.png" 800 600 || fail "s.png"
grep -q "warning: .*mlp torch has no 1-rank samples_per_s row" "$T/pe" || { cat "$T/pe"; fail "--scaling: no warning for mlp torch"; }
[ "$(grep -c . "$T/pe")" -eq 1 ] || { cat "$T/pe"; fail "--scaling: more on stderr than the one warning"; }
$PY - "$T/ks" <<'PY' || fail "--scaling: the efficiencies"
import sys
d = sys.argv[1]
want = {1: ("cnn ddptrain", [(1, 2000, 1.0), (2, 3500, 0.875)]),
        2: ("mlp ddptrain", [(1, 10000, 1.0), (2, 16700, 0.835), (4, 32000, 0.8)])}
for i, (label, pts) in want.items():
    lines = open("%s/scaling%d.dat" % (d, i)).read().splitlines()
    assert lines[0].startswith("# " + label + ":"), (i, lines[0])
    got = [tuple(float(x) for x in l.split()) for l in lines if not l.startswith("#")]
    assert len(got) == len(pts), (label, got)
    for g, p in zip(got, pts):
        assert g[0] == p[0] and g[1] == p[1] and abs(g[2] - p[2]) < 1e-12, (label, g, p)
import os
assert not os.path.exists(d + "/scaling3.dat"), "a third line (mlp torch was not skipped)"
PY

# 3b. --scaling on bench_cluster.sh's rows: efficiency against the link
# rate, one line per model-layout and implementation, the rates as
# categories slowest first and unlimited last; with samples_per_s rows too,
# both panels
cat >"$T/c.csv" <<'EOF2'
case,implementation,ranks,metric,min,median,max,unit
cluster-mlp-1x1,ddptrain-local,1,step_ms,20,20,20,ms
cluster-mlp-2x1,ddptrain-auto@unlimited,2,weak_scaling_efficiency,0.8,0.9,0.95,ratio
cluster-mlp-2x1,ddptrain-auto@1gbit,2,weak_scaling_efficiency,0.2,0.25,0.3,ratio
cluster-mlp-2x1,ddptrain-auto@10gbit,2,step_ms,30,30,30,ms
cluster-mlp-2x1,ddptrain-auto@10gbit,2,weak_scaling_efficiency,0.5,0.6,0.7,ratio
cluster-mlp-4x1,ddptrain-auto@100mbit,4,weak_scaling_efficiency,0.05,0.05,0.05,ratio
cluster-cnn-2x2,ddptrain-hier@10gbit,4,weak_scaling_efficiency,0.7,0.7,0.7,ratio
EOF2
"$DDPPLOT" --scaling "$T/c.csv" -o "$T/c.png" --keep-data "$T/kc" --size 800x600 >"$T/po" 2>"$T/pe" \
  || { cat "$T/pe"; fail "--scaling on cluster rows"; }
[ ! -s "$T/pe" ] || { cat "$T/pe"; fail "--scaling on cluster rows: stderr not empty"; }
$PY "$T/png.py" "$T/c.png" 800 600 || fail "c.png"
want='cnn-2x2 ddptrain-hier: 2 10000000000 0.7;mlp-2x1 ddptrain-auto: 1 1000000000 0.25 2 10000000000 0.6 3 ? 0.9;mlp-4x1 ddptrain-auto: 0 100000000 0.05;'
got=$(for i in 1 2 3; do
  printf '%s:' "$(sed -n '1s/^# \([^:]*\):.*/\1/p' "$T/kc/links$i.dat")"
  grep -v '^#' "$T/kc/links$i.dat" | awk '{ printf " %s %s %.15g", $1, $2, $3 }'; printf ';'
done)
[ "$got" = "$want" ] || fail "--scaling link lines: got '$got', want '$want'"
[ ! -e "$T/kc/links4.dat" ] && [ ! -e "$T/kc/scaling1.dat" ] || fail "--scaling: lines that are not in c.csv"
grep -qF 'set xtics ("100 Mbit/s" 0, "1 Gbit/s" 1, "10 Gbit/s" 2, "unlimited" 3)' "$T/kc/plot.gp" \
  || { cat "$T/kc/plot.gp"; fail "--scaling: the link-rate axis"; }
{ cat "$T/c.csv"; tail -n +2 "$T/r.csv"; } >"$T/both.csv"
"$DDPPLOT" --scaling "$T/both.csv" -o "$T/both.png" --keep-data "$T/kb" 2>"$T/pe" || { cat "$T/pe"; fail "--scaling, both kinds"; }
[ -e "$T/kb/links3.dat" ] && [ -e "$T/kb/scaling2.dat" ] && grep -q "set multiplot layout 1,2" "$T/kb/plot.gp" \
  || { ls "$T/kb"; fail "--scaling with both kinds of rows: not both panels"; }

# 4. errors: one line, the exit code, the output unchanged, nothing beside it
mkdir "$T/out"
echo "an older plot" >"$T/out/keep.png"
# expect_error CODE NEEDLE ARGS...: ddptrain-plot ARGS -o $T/out/keep.png
# (with PATH=$PLOT_PATH where that is set)
expect_error() {
  _code=$1 _needle=$2; shift 2
  env PATH="${PLOT_PATH:-$PATH}" "$DDPPLOT" "$@" -o "$T/out/keep.png" >"$T/po" 2>"$T/pe"
  _rc=$?
  [ $_rc -eq "$_code" ] || { cat "$T/pe"; fail "exit $_rc, expected $_code: $*"; }
  [ "$(wc -l <"$T/pe")" -eq 1 ] && grep -q "^ddptrain-plot: error: " "$T/pe" \
    || { cat "$T/pe"; fail "not one error line: $*"; }
  grep -qF -- "$_needle" "$T/pe" || { cat "$T/pe"; fail "message lacks '$_needle': $*"; }
  [ "$(cat "$T/out/keep.png")" = "an older plot" ] || fail "the output was changed: $*"
  [ "$(ls "$T/out")" = keep.png ] || { ls "$T/out"; fail "files left beside the output: $*"; }
}
expect_error 4 "$T/none.jsonl: cannot open it: No such file" "$T/a.jsonl" "$T/none.jsonl"
sed '3s/.*/{"type":"step", this is not JSON/' "$T/a.jsonl" >"$T/bad.jsonl"
expect_error 3 "$T/bad.jsonl:3: not a JSON object" "$T/bad.jsonl"
head -c -40 "$T/a.jsonl" >"$T/cut.jsonl"
expect_error 3 "$T/cut.jsonl:$(wc -l <"$T/a.jsonl"): not a JSON object" "$T/cut.jsonl"
grep -q "cut short" "$T/pe" || { cat "$T/pe"; fail "the cut-short last line is not called so"; }
printf '{"type":"step","step":3,"loss":"1.5"}\n' >"$T/str.jsonl"
expect_error 3 "$T/str.jsonl:1: \"loss\" is a string" "$T/str.jsonl"
printf '[1, 2]\n' >"$T/arr.jsonl"
expect_error 3 "$T/arr.jsonl:1: not a JSON object" "$T/arr.jsonl"
head -n 1 "$T/a.jsonl" >"$T/nostep.jsonl"
grep -v '"type":"step"' "$T/a.jsonl" >"$T/nostep2.jsonl"
expect_error 3 "$T/nostep.jsonl: no \"step\" records" "$T/nostep.jsonl"
expect_error 3 "$T/nostep2.jsonl: no \"step\" records" "$T/nostep2.jsonl"
: >"$T/empty.jsonl"
expect_error 3 "$T/empty.jsonl: empty" "$T/empty.jsonl"
expect_error 3 "input file 1 $T/ka is a directory, not a regular file" "$T/ka"
expect_error 3 "$T/r.csv:1: not a JSON object" "$T/r.csv"
# gnuplot absent, failing, or ending well without a PNG
PLOT_PATH=/nonexistent
expect_error 69 "apt-get install gnuplot-nox" "$T/a.jsonl"
mkdir "$T/fake"
printf '#!/bin/sh\necho "\\"plot.gp\\" line 9: error: something" >&2\nexit 1\n' >"$T/fake/gnuplot"
chmod +x "$T/fake/gnuplot"
PLOT_PATH="$T/fake:$PATH"
expect_error 70 "line 9: error: something" "$T/a.jsonl"
printf '#!/bin/sh\nexit 0\n' >"$T/fake/gnuplot"
expect_error 70 "wrote no PNG" "$T/a.jsonl"
unset PLOT_PATH
# --scaling: header, rows, nothing usable
sed '1s/median/med/' "$T/r.csv" >"$T/hdr.csv"
expect_error 3 "$T/hdr.csv:1: the header is" --scaling "$T/hdr.csv"
sed '3s/,samples\/s$//' "$T/r.csv" >"$T/row.csv"
expect_error 3 "$T/row.csv:3: 7 fields, expected 8" --scaling "$T/row.csv"
sed '3s/,2,/,two,/' "$T/r.csv" >"$T/ranks.csv"
expect_error 3 "$T/ranks.csv:3: ranks 'two'" --scaling "$T/ranks.csv"
grep -v ',1,samples_per_s' "$T/r.csv" >"$T/no1.csv"
"$DDPPLOT" --scaling "$T/no1.csv" -o "$T/out/keep.png" 2>"$T/pe"
[ $? -eq 3 ] && grep -q "no usable rows" "$T/pe" && [ "$(grep -c 'error' "$T/pe")" -eq 1 ] \
  || { cat "$T/pe"; fail "--scaling without 1-rank rows"; }
expect_error 4 "$T/none.csv: cannot open it" --scaling "$T/none.csv"
# cluster rows: no @RATE, a rate that is none, a bad efficiency, two rows
# for one rate, and a file with cluster rows but no efficiency among them
sed '3s/@unlimited//' "$T/c.csv" >"$T/noat.csv"
expect_error 3 "$T/noat.csv:3: cluster row implementation 'ddptrain-auto' has no @RATE" --scaling "$T/noat.csv"
sed '3s/@unlimited/@fast/' "$T/c.csv" >"$T/rate.csv"
expect_error 3 "$T/rate.csv:3: link rate 'fast' is neither" --scaling "$T/rate.csv"
sed '4s/,0.25,/,-1,/' "$T/c.csv" >"$T/eff.csv"
expect_error 3 "$T/eff.csv:4: efficiency '-1' is not a number > 0" --scaling "$T/eff.csv"
{ cat "$T/c.csv"; echo "cluster-mlp-2x1,ddptrain-auto@1000mbit,2,weak_scaling_efficiency,1,1,1,ratio"; } >"$T/dup.csv"
expect_error 3 "$T/dup.csv:9: a second weak_scaling_efficiency row for mlp-2x1 ddptrain-auto at the same link rate (the first is line 4)" \
  --scaling "$T/dup.csv"
grep -v weak_scaling_efficiency "$T/c.csv" >"$T/noeff.csv"
expect_error 3 "$T/noeff.csv: no usable rows" --scaling "$T/noeff.csv"
# the output: a missing directory, no -o, a usage error
"$DDPPLOT" "$T/a.jsonl" -o "$T/nodir/x.png" >"$T/po" 2>"$T/pe"
rc=$?
[ $rc -eq 4 ] || { cat "$T/pe"; fail "-o in a missing directory: exit $rc, expected 4"; }
grep -q "^ddptrain-plot: error: -o $T/nodir/x.png: cannot create a file in $T/nodir: No such file or directory" "$T/pe" \
  && [ "$(wc -l <"$T/pe")" -eq 1 ] || { cat "$T/pe"; fail "-o in a missing directory: message"; }
[ ! -e "$T/nodir" ] || fail "-o in a missing directory: something was written"
"$DDPPLOT" "$T/a.jsonl" -o "$T/out" 2>"$T/pe"; rc=$?
[ $rc -eq 2 ] && grep -q "error: -o $T/out is a directory" "$T/pe" || { cat "$T/pe"; fail "-o a directory: exit $rc"; }
"$DDPPLOT" "$T/a.jsonl" 2>"$T/pe"; rc=$?
[ $rc -eq 2 ] && grep -q "error: no output: -o" "$T/pe" || { cat "$T/pe"; fail "no -o: exit $rc"; }
"$DDPPLOT" --help | grep -q "one training history" || fail "--help"
"$DDPPLOT" --version | grep -q "^ddptrain-plot [0-9]" || fail "--version"
echo ok
