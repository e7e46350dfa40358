#!/bin/sh
# test_clash.sh -- outputs named like inputs or like each other, and FIFOs,
# in every tool (src/ground/pathclash.c): each is refused at once, under a
# timeout (a FIFO opened would block), with one error line naming both
# roles, the exit code of its class, and every file left as it was.
#   ddptrain-plot: -o the metrics file, also through a symlink; -o among
#     --keep-data's files; a FIFO as input or as -o;
#   ddptrain-prep: csv and idx -o over their inputs (a hard link, ../);
#     split's shards over the input and over each other (a symlink);
#     synthetic -o a FIFO; info of a FIFO;
#   ddptrain: --metrics the same file as --save (neither there yet), over
#     the deck through a symlink, named like a checkpoint in --ckpt-dir;
#     a FIFO as the deck.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
"$top_builddir/tests/tools/make_bad_deck" good "$T/d.h5" || fail "make_bad_deck good"
mkfifo "$T/fifo" || fail "mkfifo"
printf '{"type":"step","step":1,"loss":2.5}\n' >"$T/m.jsonl"
ln -s m.jsonl "$T/m-link.jsonl" || exit 99
printf 'a,b,label\n1,2,0\n3,4,1\n' >"$T/t.csv"
ln "$T/t.csv" "$T/t-hard.csv" || exit 99
mkdir "$T/sub" "$T/ck" || exit 99
m="--model linear:16,relu,linear:auto --batch 8 --steps 2 --log-every 0 --eval-every 0"

# run CODE NEEDLE... -- PROGRAM ARGS: exits CODE within 20 s, one error line
# holding every NEEDLE, no crash; the files of $T as they were (sums, and
# the FIFO still a FIFO), nothing new
sums() { (cd "$T" && find . -path ./e -prune -o -path ./o -prune -o -type f -print | sort | xargs cksum) }
run() {
  code=$1; shift
  needles=""
  while [ "$1" != "--" ]; do needles="$needles|$1"; shift; done
  shift
  before=$(sums)
  timeout -k 5 20 "$@" >"$T/o" 2>"$T/e"
  rc=$?
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "hang (timeout): $*"
  [ $rc -eq "$code" ] || { cat "$T/o" "$T/e"; fail "exit $rc, expected $code: $*"; }
  [ "$(grep -c "error:" "$T/e")" -eq 1 ] || { cat "$T/e"; fail "not one error line: $*"; }
  grep -q "core dumped\|Segmentation fault\|HDF5-DIAG" "$T/e" && { cat "$T/e"; fail "crash: $*"; }
  IFS='|'
  for s in $needles; do
    [ -z "$s" ] && continue
    grep -qF -- "$s" "$T/e" || { unset IFS; cat "$T/e"; fail "message lacks '$s': $*"; }
  done
  unset IFS
  [ "$(sums)" = "$before" ] || { sums; fail "files changed or appeared: $*"; }
  [ -p "$T/fifo" ] || fail "the FIFO was replaced: $*"
  echo "ok ($code): $(grep 'error:' "$T/e")"
}

# ddptrain-plot (its check runs before gnuplot is looked for)
run 2 "-o $T/m.jsonl is input file 1 $T/m.jsonl (the same file)" "choose another -o name" \
  -- "$DDPPLOT" "$T/m.jsonl" -o "$T/m.jsonl"
run 2 "-o $T/m-link.jsonl is input file 1 $T/m.jsonl" -- "$DDPPLOT" "$T/m.jsonl" -o "$T/m-link.jsonl"
run 2 "-o $T/m.jsonl is input file 2 $T/m-link.jsonl" \
  -- "$DDPPLOT" "$T/d.h5" "$T/m-link.jsonl" --output="$T/m.jsonl"
run 2 "-o $T/sub/plot.gp is named like the files written in --keep-data $T/sub" \
  -- "$DDPPLOT" "$T/m.jsonl" -o "$T/sub/plot.gp" --keep-data "$T/sub"
run 2 "--scaling $T/r.csv" "-o $T/sub/../r.csv" -- "$DDPPLOT" --scaling "$T/r.csv" -o "$T/sub/../r.csv"
run 3 "input file 1 $T/fifo is a FIFO" "not a regular file" -- "$DDPPLOT" "$T/fifo" -o "$T/p.png"
run 2 "-o $T/fifo is a FIFO" -- "$DDPPLOT" "$T/m.jsonl" -o "$T/fifo"

# ddptrain-prep: every subcommand
run 2 "-o $T/t-hard.csv is the CSV file $T/t.csv (the same file)" \
  -- "$DDPPREP" csv "$T/t.csv" --label-column label -o "$T/t-hard.csv"
run 2 "-o $T/sub/../t.csv is the CSV file t.csv" \
  -- sh -c "cd '$T' && exec '$DDPPREP' csv t.csv --label-column label -o '$T/sub/../t.csv'"
run 2 "-o $T/m.jsonl is LABELS $T/m.jsonl" -- "$DDPPREP" idx "$T/t.csv" "$T/m.jsonl" -o "$T/m.jsonl"
run 2 "-o $T/m-link.jsonl is --val IMAGES $T/m.jsonl" \
  -- "$DDPPREP" idx "$T/t.csv" "$T/t.csv" --val "$T/m.jsonl" "$T/t.csv" -o "$T/m-link.jsonl"
run 3 "LABELS $T/fifo is a FIFO" -- "$DDPPREP" idx "$T/t.csv" "$T/fifo" -o "$T/x.h5"
ln -s ../d.h5 "$T/sub/s-1.h5" || exit 99
run 2 "shard 1 $T/sub/s-1.h5 is the input $T/d.h5" -- "$DDPPREP" split "$T/d.h5" --shards 2 -o "$T/sub/s"
rm "$T/sub/s-1.h5" && ln -s s-0.h5 "$T/sub/s-1.h5" || exit 99
run 2 "shard 1 $T/sub/s-1.h5 is shard 0 $T/sub/s-0.h5" -- "$DDPPREP" split "$T/d.h5" --shards 2 -o "$T/sub/s"
rm "$T/sub/s-1.h5"
run 2 "-o $T/fifo is a FIFO" -- "$DDPPREP" synthetic --classes 2 --features 4 --samples 20 -o "$T/fifo"
run 3 "the file $T/fifo is a FIFO" -- "$DDPPREP" info "$T/d.h5" "$T/fifo"

# ddptrain
run 2 "--metrics $T/sub/../w.h5 is --save $T/w.h5 (the same file)" \
  -- "$DDPTRAIN" "$T/d.h5" $m --save "$T/w.h5" --metrics "$T/sub/../w.h5"
run 2 "--metrics $T/dl.h5 is the input deck $T/d.h5" \
  -- sh -c "ln -s d.h5 '$T/dl.h5' && exec '$DDPTRAIN' '$T/d.h5' $m --metrics '$T/dl.h5'"
rm "$T/dl.h5"
run 2 "--metrics $T/ck/ckpt_00000002.h5 is named like the files written in --ckpt-dir $T/ck" \
  -- "$DDPTRAIN" "$T/d.h5" $m --ckpt-dir "$T/ck" --ckpt-every 1 --metrics "$T/ck/ckpt_00000002.h5"
run 2 "--save $T/ck/ckpt_00000009.h5 is named like the files written in --ckpt-dir $T/ck" \
  -- "$DDPTRAIN" "$T/d.h5" $m --ckpt-dir "$T/ck" --save "$T/ck/ckpt_00000009.h5"
run 3 "$T/fifo is a FIFO" -- "$DDPTRAIN" "$T/fifo" $m
[ -z "$(ls "$T/ck")" ] || fail "a checkpoint was written in --ckpt-dir"
echo "ok: every tool refused every clash"
