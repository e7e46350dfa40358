#!/bin/sh
# test_prep.sh -- ddptrain-prep end to end: a tiny IDX file (plain and
# gzip'd) round trip read back with h5dump, real Fashion-MNIST when the
# Debian package is installed, CSV round trips, synthetic determinism,
# split + info, and the bad inputs (one clear line, non-zero exit, no output
# file left behind; a header declaring 10^12 rows refused by info and split
# at once, as ddptrain refuses it).
. ./testenv.sh || exit 99
set -u
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v h5dump >/dev/null 2>&1 || fail "h5dump is needed (Debian/Ubuntu: apt-get install hdf5-tools)"
t=$(mktemp -d) || exit 99
trap 'rm -rf "$t"' EXIT
P="$DDPPREP"

# dump DATASET FILE: its values, comma-separated, without spaces
dump() {
  h5dump -d "$1" -y -w 0 -o "$t/dump.txt" "$2" >/dev/null 2>&1 || fail "h5dump $1 $2"
  tr -d ' \n' <"$t/dump.txt"
}
# attr OBJECT NAME FILE: an attribute's value(s)
attr() {
  h5dump -a "$1/$2" "$3" 2>/dev/null | sed -n 's/^ *(0): //p' | tr -d ' \n'
}
# expect_error CODE PATTERN cmd...: exit code CODE, one error line matching PATTERN
expect_error() {
  _code=$1 _pat=$2; shift 2
  "$@" >"$t/o" 2>"$t/e"; _rc=$?
  [ "$_rc" -eq "$_code" ] || fail "$*: exit $_rc, expected $_code: $(cat "$t/e")"
  [ "$(grep -c 'error' "$t/e")" -eq 1 ] || fail "$*: expected one error line: $(cat "$t/e")"
  grep -q -- "$_pat" "$t/e" || fail "$*: message lacks '$_pat': $(cat "$t/e")"
}

# ---- usage ----
"$P" --help >"$t/help" || fail "--help exited non-zero"
for w in idx csv synthetic split info; do grep -q "$w" "$t/help" || fail "--help lacks $w"; done
expect_error 2 "no command" "$P"
expect_error 2 "unknown command 'frobnicate'" "$P" frobnicate
expect_error 2 "no output file" "$P" synthetic --classes 3 --features 4 --samples 10
expect_error 2 "unknown argument '--bogus'" "$P" synthetic --bogus -o "$t/x.h5"
expect_error 2 "not an integer" "$P" synthetic --classes 3 --features 4 --samples -5 -o "$t/x.h5"

# ---- IDX: 3 images of 2x4 pixels (0..22 and 255), labels 2 0 1 ----
printf '\000\000\010\003\000\000\000\003\000\000\000\002\000\000\000\004' >"$t/img.idx"
printf '\000\001\002\003\004\005\006\007\010\011\012\013\014\015\016\017\020\021\022\023\024\025\026\377' >>"$t/img.idx"
printf '\000\000\010\001\000\000\000\003\002\000\001' >"$t/lab.idx"
pixels="0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,255"
"$P" idx "$t/img.idx" "$t/lab.idx" -o "$t/idx.h5" --val "$t/img.idx" "$t/lab.idx" \
  || fail "idx conversion failed"
[ "$(dump /train/x "$t/idx.h5")" = "$pixels" ] || fail "idx pixels: $(dump /train/x "$t/idx.h5")"
[ "$(dump /train/y "$t/idx.h5")" = "2,0,1" ] || fail "idx labels: $(dump /train/y "$t/idx.h5")"
[ "$(dump /val/y "$t/idx.h5")" = "2,0,1" ] || fail "idx val labels"
[ "$(attr /train/y classes "$t/idx.h5")" = "3" ] || fail "idx classes attribute"
h5dump -H -d /train/x "$t/idx.h5" | grep -q "( 3, 2, 4 )" || fail "idx shape is not [3, 2, 4]"
# the statistics are in scaled units: mean of pixels / 255
mean=$(attr /train/x mean "$t/idx.h5")
case "$mean" in 0.0830*) ;; *) fail "idx mean attribute $mean (expected 508/24/255)";; esac
# gzip'd input gives the same file contents
gzip -c "$t/img.idx" >"$t/img.idx.gz" && gzip -c "$t/lab.idx" >"$t/lab.idx.gz"
"$P" idx "$t/img.idx.gz" "$t/lab.idx.gz" -o "$t/idxgz.h5" || fail "gzip'd idx conversion failed"
[ "$(dump /train/x "$t/idxgz.h5")" = "$pixels" ] || fail "gzip'd idx pixels differ"
"$P" info "$t/idx.h5" >"$t/info" || fail "info rejects the idx output: $(cat "$t/info")"
grep -q "valid input deck: train: 3 samples of 1x2x4 images (uint8), 3 classes" "$t/info" \
  || fail "info: $(cat "$t/info")"
# --limit / --val-limit keep the first N samples (statistics of those only);
# a limit above the count keeps all
"$P" idx "$t/img.idx" "$t/lab.idx" --limit 2 --val "$t/img.idx" "$t/lab.idx" --val-limit 1 \
  -o "$t/lim.h5" || fail "idx --limit conversion failed"
[ "$(dump /train/x "$t/lim.h5")" = "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15" ] \
  || fail "idx --limit 2 pixels: $(dump /train/x "$t/lim.h5")"
[ "$(dump /train/y "$t/lim.h5")" = "2,0" ] || fail "idx --limit 2 labels: $(dump /train/y "$t/lim.h5")"
[ "$(dump /val/y "$t/lim.h5")" = "2" ] || fail "idx --val-limit 1 labels: $(dump /val/y "$t/lim.h5")"
case "$(attr /train/x mean "$t/lim.h5")" in 0.0294*) ;; *) fail "idx --limit mean (expected 120/16/255)";; esac
"$P" idx "$t/img.idx" "$t/lab.idx" --limit=9 -o "$t/lim9.h5" || fail "idx --limit=9 failed"
[ "$(dump /train/y "$t/lim9.h5")" = "2,0,1" ] || fail "idx --limit 9 of 3 labels"
expect_error 2 "--limit: '0' is not an integer" "$P" idx "$t/img.idx" "$t/lab.idx" --limit 0 -o "$t/bad.h5"
expect_error 2 "--val-limit without --val" "$P" idx "$t/img.idx" "$t/lab.idx" --val-limit 1 -o "$t/bad.h5"
# bad IDX input: mismatched counts, truncated data, not IDX; nothing left behind
printf '\000\000\010\001\000\000\000\002\002\000' >"$t/lab2.idx"
expect_error 3 "lab2.idx holds 2 labels\|holds 3 images" "$P" idx "$t/img.idx" "$t/lab2.idx" -o "$t/bad.h5"
head -c 30 "$t/img.idx" >"$t/trunc.idx"
expect_error 3 "trunc.idx: truncated IDX" "$P" idx "$t/trunc.idx" "$t/lab.idx" -o "$t/bad.h5"
expect_error 3 "lab.idx: IDX file has 1 dimensions" "$P" idx "$t/lab.idx" "$t/lab.idx" -o "$t/bad.h5"
expect_error 3 "missing.idx: cannot open" "$P" idx "$t/missing.idx" "$t/lab.idx" -o "$t/bad.h5"
expect_error 2 "two IDX files" "$P" idx "$t/img.idx" -o "$t/bad.h5"
ls "$t" | grep -q "bad.h5" && fail "a failed conversion left $(ls "$t" | grep bad.h5)"

# ---- real Fashion-MNIST (Debian's dataset-fashion-mnist), when installed ----
fm=/usr/share/datasets/fashion-mnist
if [ -r "$fm/train-images-idx3-ubyte.gz" ]; then
  "$P" idx "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" -o "$t/fm.h5" \
    || fail "Fashion-MNIST conversion failed"
  h5dump -d /train/y -s 0 -c 3 -y -w 0 -o "$t/fm.txt" "$t/fm.h5" >/dev/null
  [ "$(tr -d ' \n' <"$t/fm.txt")" = "9,0,0" ] || fail "Fashion-MNIST first labels: $(cat "$t/fm.txt")"
  h5dump -H -d /train/x "$t/fm.h5" | grep -q "( 60000, 28, 28 )" || fail "Fashion-MNIST shape"
  case "$(attr /train/x mean "$t/fm.h5")" in 0.286*) ;; *) fail "Fashion-MNIST mean";; esac
  rm -f "$t/fm.h5"
else
  echo "note: $fm not installed; the real-data check is not run (the tiny IDX round trip was)"
fi

# ---- CSV ----
cat >"$t/a.csv" <<'EOF'
a,b,label,c
1.5,-2,1,0.25
0,3,0,-1
"2",4.5,2,8
EOF
"$P" csv "$t/a.csv" --label-column label -o "$t/csv.h5" || fail "csv conversion failed"
[ "$(dump /train/x "$t/csv.h5")" = "1.5,-2,0.25,0,3,-1,2,4.5,8" ] || fail "csv features: $(dump /train/x "$t/csv.h5")"
[ "$(dump /train/y "$t/csv.h5")" = "1,0,2" ] || fail "csv labels: $(dump /train/y "$t/csv.h5")"
"$P" csv "$t/a.csv" --label-column label --regression -o "$t/reg.h5" || fail "csv --regression"
[ "$(dump /train/y "$t/reg.h5")" = "1,0,2" ] || fail "csv targets"
h5dump -H -d /train/y "$t/reg.h5" | grep -q "H5T_IEEE_F32LE" || fail "csv targets are not float"
"$P" csv "$t/a.csv" --target-columns b,c -o "$t/reg2.h5" || fail "csv --target-columns"
[ "$(dump /train/y "$t/reg2.h5")" = "-2,0.25,3,-1,4.5,8" ] || fail "csv target columns"
[ "$(dump /train/x "$t/reg2.h5")" = "1.5,1,0,0,2,2" ] || fail "csv features beside targets"
printf 'x,kind\n1,dog\n2,cat\n3,dog\n4,emu\n' >"$t/names.csv"
"$P" csv "$t/names.csv" --label-column kind -o "$t/names.h5" || fail "csv class names"
[ "$(dump /train/y "$t/names.h5")" = "1,0,1,2" ] || fail "csv named labels: $(dump /train/y "$t/names.h5")"
h5dump -a /train/y/class_names "$t/names.h5" | grep -q '"cat,dog,emu"' || fail "class_names attribute"
printf 'a,label\n1,0\n2,1\nx,0\n' >"$t/bad.csv"
expect_error 3 "bad.csv data row 3, column 'a': 'x'" "$P" csv "$t/bad.csv" --label-column label -o "$t/bad.h5"
printf 'a,label\n1,0\n1e39,1\n' >"$t/big.csv"
expect_error 3 "not a finite number" "$P" csv "$t/big.csv" --label-column label -o "$t/bad.h5"
expect_error 2 "no column 'nope'" "$P" csv "$t/a.csv" --label-column nope -o "$t/bad.h5"
ls "$t" | grep -q "bad.h5" && fail "a failed csv conversion left a file"

# ---- synthetic: deterministic from the seed ----
"$P" synthetic --classes 5 --features 12 --samples 3000 --val 500 --seed 7 -o "$t/s1.h5" || fail "synthetic"
"$P" synthetic --classes 5 --features 12 --samples 3000 --val 500 --seed 7 -o "$t/s2.h5" || fail "synthetic"
"$P" synthetic --classes 5 --features 12 --samples 3000 --val 500 --seed 8 -o "$t/s3.h5" || fail "synthetic"
h5dump "$t/s1.h5" | sed 1d >"$t/d1"; h5dump "$t/s2.h5" | sed 1d >"$t/d2"; h5dump "$t/s3.h5" | sed 1d >"$t/d3"
cmp -s "$t/d1" "$t/d2" || fail "synthetic: the same seed gave different contents"
cmp -s "$t/d1" "$t/d3" && fail "synthetic: different seeds gave the same contents"
"$P" synthetic --regression 3 --features 6 --samples 100 --seed 1 -o "$t/sr.h5" || fail "synthetic --regression"
h5dump -H -d /train/y "$t/sr.h5" | grep -q "( 100, 3 )" || fail "synthetic regression targets shape"

# ---- split + info ----
"$P" split "$t/s1.h5" --shards 3 -o "$t/part" >"$t/split.out" || fail "split: $(cat "$t/split.out")"
for k in 0 1 2; do [ -f "$t/part-$k.h5" ] || fail "split: no part-$k.h5"; done
[ "$(dump /train/y "$t/part-0.h5"),$(dump /train/y "$t/part-1.h5"),$(dump /train/y "$t/part-2.h5")" = \
  "$(dump /train/y "$t/s1.h5")" ] || fail "split: the shards' labels do not concatenate to the input's"
[ "$(dump /train/x "$t/part-0.h5"),$(dump /train/x "$t/part-1.h5"),$(dump /train/x "$t/part-2.h5")" = \
  "$(dump /train/x "$t/s1.h5")" ] || fail "split: the shards' samples do not concatenate to the input's"
[ "$(dump /val/y "$t/part-0.h5")" = "$(dump /val/y "$t/s1.h5")" ] || fail "split: /val not in the first shard"
h5dump -H "$t/part-1.h5" | grep -q '"val"' && fail "split: /val in a later shard"
[ "$(attr /train/x mean "$t/part-2.h5")" = "$(attr /train/x mean "$t/s1.h5")" ] || fail "split: attributes not copied"
"$P" info "$t/part-0.h5" "$t/part-1.h5" "$t/part-2.h5" >"$t/info" || fail "info on shards: $(cat "$t/info")"
grep -q "valid input deck: train: 3000 samples of 12 features (float32), 5 classes, 3 files" "$t/info" \
  || fail "info on shards: $(cat "$t/info")"
grep -q "val: 500 samples" "$t/info" || fail "info lacks the val split"
grep -q "chunks" "$t/info" && grep -q "histogram" "$t/info" && grep -q "mean" "$t/info" \
  || fail "info lacks chunking, histogram or statistics"
expect_error 2 "fewer than --shards" "$P" split "$t/idx.h5" --shards 4 -o "$t/p2"

# info on bad decks: non-zero exit and why
printf 'this is not HDF5\n' >"$t/text.h5"
expect_error 3 "text.h5: not an HDF5 file" "$P" info "$t/text.h5"
"$P" synthetic --classes 3 --features 5 --samples 50 --seed 1 -o "$t/f5.h5" || fail "synthetic"
expect_error 3 "the shards of one deck must agree" "$P" info "$t/part-0.h5" "$t/f5.h5"
# a header declaring 10^12 rows over a few KiB: info and split refuse it at
# once, as ddptrain does (no scan of the declared rows, no shard left)
"$top_builddir/tests/tools/make_bad_deck" huge-n "$t/huge.h5" || fail "make_bad_deck huge-n"
huge="huge.h5: dataset /train/x declares \[1000000000000,8\] (2.98e+04 GiB) but only 0% of it is stored"
expect_error 3 "$huge" timeout 20 "$P" info "$t/huge.h5"
grep -q "no statistics: .*$huge" "$t/o" || fail "info on a huge header: $(cat "$t/o")"
grep -q "^NOT a valid input deck: .*$huge" "$t/o" || fail "info on a huge header: $(cat "$t/o")"
expect_error 3 "$huge" timeout 20 "$P" split "$t/huge.h5" --shards 2 -o "$t/hp"
ls "$t"/hp* >/dev/null 2>&1 && fail "split of a huge header left $(ls "$t"/hp*)"
if command -v h5import >/dev/null 2>&1; then
  printf '1 2 3\n4 nan 6\n' >"$t/x.txt"; printf '0 1\n' >"$t/y.txt"
  printf 'PATH /train/x\nINPUT-CLASS TEXTFP\nRANK 2\nDIMENSION-SIZES 2 3\nOUTPUT-CLASS FP\nOUTPUT-SIZE 32\n' >"$t/x.cfg"
  printf 'PATH /train/y\nINPUT-CLASS TEXTIN\nRANK 1\nDIMENSION-SIZES 2\nOUTPUT-CLASS IN\nOUTPUT-SIZE 32\n' >"$t/y.cfg"
  h5import "$t/x.txt" -c "$t/x.cfg" "$t/y.txt" -c "$t/y.cfg" -o "$t/nan.h5" || fail "h5import"
  expect_error 3 "nan.h5: /train/x sample 1, element 1 is NaN" "$P" info "$t/nan.h5"
  grep -q "NON-FINITE values: 1" "$t/o" || fail "info does not count the NaN: $(cat "$t/o")"
fi
echo "ok"
