#!/bin/sh
# test_fingerprint.sh -- the start-up content check: ranks that read
# different content under the same path (a stale node-local copy) are
# stopped with exit 6 and one line naming the file, the two ranks and what
# differs; identical copies train.  Ranks of one mpirun share a file system,
# so a wrapper runs each rank in a directory of its own (r0, r1, ...) where
# the same relative path names that rank's copy.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
MK="$top_builddir/tests/tools/make_bad_deck"
for k in good mean-a mean-b mid-chunk mid-label y-classes val-a val-b unsampled chunk20; do
  "$MK" $k "$T/$k.h5" || fail "make_bad_deck $k"
done
for s in 1 2; do
  "$DDPPREP" synthetic --classes 4 --features 8 --samples 300 --val 40 --seed $s \
    -o "$T/seed$s.h5" >/dev/null || fail "prep seed $s"
done
cat >"$T/rankdir" <<EOF
#!/bin/sh
# run the command in \$T/r<rank>
cd "$T/r\${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-0}}" && exec "\$@"
EOF
chmod +x "$T/rankdir"

base="--model linear:16,relu,linear:auto --batch 8 --epochs 1 --log-every 0 --eval-every 0"
# place NAME DECK...: copy the i-th DECK to $T/r<i>/NAME (rank i's view of NAME)
place() {
  name=$1; shift
  i=0
  for d in "$@"; do
    mkdir -p "$T/r$i" && cp "$T/$d" "$T/r$i/$name" || exit 99
    i=$((i + 1))
  done
}
# run NP ARGS...: ddptrain on NP ranks, each in its own directory
run() {
  np=$1; shift
  rm -f "$T"/r*/out.h5
  DDP_TEST_TIMEOUT=120 mpirun_np "$np" "$T/rankdir" "$DDPTRAIN" "$@" $base --save out.h5 \
    >"$T/o" 2>"$T/e"
  rc=$?
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "$what: hang (timeout): $*"
}
# differs NP CASE NEEDLE... -- ARGS: exit 6, one error line holding every NEEDLE, nothing saved
differs() {
  np=$1; what=$2; shift 2
  needles=""
  while [ "$1" != "--" ]; do needles="$needles|$1"; shift; done
  shift
  run "$np" "$@"
  ddp_expect_error "$T/e" $rc 6 "$what: $*" "$needles"
  ls "$T"/r*/out.h5 >/dev/null 2>&1 && fail "$what: an output file was written: $*"
  echo "ok (6, $what): $(grep 'error:' "$T/e")"
}
# same NP CASE ARGS: trains (exit 0, weights saved)
same() {
  np=$1; what=$2; shift 2
  run "$np" "$@"
  [ $rc -eq 0 ] || { cat "$T/e"; fail "$what: exit $rc, expected 0: $*"; }
  [ -f "$T/r0/out.h5" ] || fail "$what: no output: $*"
}

msg="read different data under the same path"
# the issue's case: decks of the same shape from other seeds (data and mean/std differ)
place data.h5 seed1.h5 seed2.h5
differs 2 "other seed" "content of input file data.h5" "rank 0 and rank 1 $msg" \
  "give every rank the same file" \
  "attributes (mean, std, scale, classes) of /train/x or /train/y differ" -- data.h5
# identical copies (other files, same bytes) train
place data.h5 seed1.h5 seed1.h5
same 2 "identical copies" data.h5
echo "ok (0): identical copies train"
# only the attribute mean differs
place data.h5 mean-a.h5 mean-b.h5
differs 2 "mean only" "rank 0 and rank 1 $msg" \
  "attributes (mean, std, scale, classes) of /train/x" -- data.h5
# one value in a chunk the sample reads (chunk 10 of 20)
place data.h5 good.h5 mid-chunk.h5
differs 2 "sampled middle chunk" "rank 0 and rank 1 $msg" \
  "the sampled chunks of /train/x or /train/y differ" -- data.h5
# one label only (/train/x, the attributes and the file size as they were):
# a stale label file on one node
place data.h5 good.h5 mid-label.h5
differs 2 "one label" "rank 0 and rank 1 $msg" \
  "the sampled chunks of /train/x or /train/y differ" -- data.h5
# an attribute of the labels only (classes = 4, which the labels fit)
place data.h5 good.h5 y-classes.h5
differs 2 "labels' attribute" "rank 0 and rank 1 $msg" \
  "attributes (mean, std, scale, classes) of /train/x or /train/y differ" -- data.h5
# only /val differs (one label): evaluation would differ between the ranks
place data.h5 val-a.h5 val-b.h5
differs 2 "one /val label" "rank 0 and rank 1 $msg" "/val" -- data.h5
# the same values in other chunks
place data.h5 good.h5 chunk20.h5
differs 2 "other chunking" "rank 0 and rank 1 $msg" \
  "shapes, types or chunking of /train/x" -- data.h5
# rank 2 of 3 is the odd one out; the second of two shards differs (the
# shards carry the same attributes -- none -- as a deck's shards must)
place a.h5 chunk20.h5 chunk20.h5 chunk20.h5
place b.h5 good.h5 good.h5 mid-chunk.h5
differs 3 "second shard on rank 2" "content of input file b.h5: rank 0 and rank 2 $msg" \
  "sampled chunks of /train/x" \
  -- a.h5 b.h5
# ranks 1 and 2 both differ from rank 0: the first is named, the others counted
place b.h5 good.h5 mid-chunk.h5 mid-chunk.h5
differs 3 "two odd ranks" "content of input file b.h5: rank 0 and rank 1 $msg" \
  "other ranks differ too" \
  -- a.h5 b.h5
# a change outside the sample (chunk 3 of 20) is not seen: the check reads
# 8 blocks of each dataset, not the whole file (docs/parallelism.md,
# "Start-up")
place data.h5 good.h5 unsampled.h5
same 2 "change outside the sample" data.h5
echo "ok (0): a change outside the sampled chunks is not detected (documented)"
echo ok
