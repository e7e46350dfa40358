#!/bin/sh
# test_files.sh -- hostile files and options, on 2 ranks: each case ends
# within a timeout with exactly one `ddptrain: error:` line and its exit code,
# no core dump, and the files involved left as they were.
#   --config: /dev/zero, a directory, a FIFO, a huge file, a binary file (2);
#   --save: over the input deck (also through a symlink) or the --init file
#     (2, the file unchanged); over a FIFO or a device node (2, still a FIFO
#     and a device); through a symlink to its target (the link stays);
#   a checkpoint over a FIFO in --ckpt-dir (4, still a FIFO);
#   temporary files: a stale one of this host's dead process is removed by
#     the next run (--save and --ckpt-dir), one of another host, a live
#     process or another target, or another name, is kept;
#   --init naming a FIFO, --resume naming a directory (3);
#   ddptrain-prep: the disk fills up while the file is closed (ulimit -f:
#     exit 4 and one line, no crash in HDF5's exit handler, no temporary
#     file); with a full tmpfs (root, unshare -m; skipped otherwise):
#     ddptrain-prep and --save (at start-up) leave no temporary file; a tmpfs too small
#     for the deck's chunk (lost at its dataset's close): exit 4, no file;
#   --init: NaN in a tensor (3, the dataset and element named);
#   --ckpt-dir and --metrics through a symbolic link loop, --ckpt-dir on a
#     read-only file system (the full-disk namespace): the cause named (4);
#   --resume auto past 3000 junk files named like checkpoints: 5 warning
#     lines (3 named, the rest counted, a name ddptrain does not write);
#   --freeze with an empty name, --freeze of every parameter, --model with no
#     parameters (2).
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
MK="$top_builddir/tests/tools/make_bad_deck"
"$MK" good "$T/d.h5" || fail "make_bad_deck good"
"$MK" nan-weights "$T/nan-w.h5" || fail "make_bad_deck nan-weights"
cp "$T/d.h5" "$T/d0.h5" || exit 99
mkfifo "$T/fifo" || fail "mkfifo"
m="--model linear:16,relu,linear:auto --batch 8 --steps 2 --log-every 0 --eval-every 0"
export DDP_TEST_TIMEOUT=${DDP_TEST_TIMEOUT:-60}

# expect CODE NEEDLE... -- ARGS: ddptrain ARGS on 2 ranks exits CODE within
# the timeout, with one error line holding every NEEDLE (fixed strings)
expect() {
  code=$1; shift
  needles=""
  while [ "$1" != "--" ]; do needles="$needles|$1"; shift; done
  shift
  mpirun_np 2 "$DDPTRAIN" "$@" >"$T/o" 2>"$T/e"
  rc=$?
  [ $rc -eq "$code" ] || cat "$T/o"
  ddp_expect_error "$T/e" $rc "$code" "$*" "$needles"
  echo "ok ($code): $(grep 'error:' "$T/e")"
}
# run1 ARGS: ddptrain on 1 rank, started directly (the runs that succeed)
run1() { timeout -k 10 "$DDP_TEST_TIMEOUT" "$DDPTRAIN" "$@"; }
# unchanged FILE: FILE is still d.h5 as it was made
unchanged() { cmp -s "$1" "$T/d0.h5" || fail "$1 was changed or replaced"; }

# 1. --config that is not a small regular text file
expect 2 "--config /dev/zero is a character device" -- "$T/d.h5" $m --config /dev/zero
expect 2 "--config $T is a directory" -- "$T/d.h5" $m --config "$T"
expect 2 "--config $T/fifo is a FIFO" -- "$T/d.h5" $m --config "$T/fifo"
truncate -s 2M "$T/huge.cfg" || exit 99
expect 2 "--config $T/huge.cfg has 2097152 bytes" -- "$T/d.h5" $m --config "$T/huge.cfg"
printf 'batch = 8\nlr = 0.1\0\n' >"$T/nul.cfg"
expect 2 "config file $T/nul.cfg line 2: a NUL byte" -- "$T/d.h5" $m --config "$T/nul.cfg"

# 2. --save over an input: the deck, the deck through a symlink, --init
ln -s d.h5 "$T/link.h5" || exit 99
expect 2 "--save $T/d.h5 is the input deck $T/d.h5" "choose another --save name" \
  -- "$T/d.h5" $m --save "$T/d.h5"
unchanged "$T/d.h5"
expect 2 "--save $T/link.h5 is the input deck $T/d.h5" -- "$T/d.h5" $m --save "$T/link.h5"
unchanged "$T/d.h5"
[ -L "$T/link.h5" ] || fail "the symlink to the deck was replaced"
run1 "$T/d.h5" $m --save "$T/w.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "training run"; }
cp "$T/w.h5" "$T/w0.h5" || exit 99
expect 2 "--save $T/w.h5 is --init $T/w.h5" -- "$T/d.h5" $m --init "$T/w.h5" --save "$T/w.h5"
cmp -s "$T/w.h5" "$T/w0.h5" || fail "the --init file was changed"

# 3. --save over a FIFO or a device node (made here, never a real one): refused, left as they were
expect 2 "--save $T/fifo is a FIFO" "not a regular file" -- "$T/d.h5" $m --save "$T/fifo"
[ -p "$T/fifo" ] || fail "the FIFO was replaced"
if mknod "$T/dev" c 1 3 2>/dev/null; then
  expect 2 "--save $T/dev is a character device" -- "$T/d.h5" $m --save "$T/dev"
  [ -c "$T/dev" ] || fail "the device node was replaced"
  rm -f "$T/dev"
else
  echo "note: mknod not permitted (not root): the device-node case was not run"
fi
# a checkpoint whose name a FIFO holds: the same rules for --ckpt-dir files
mkdir "$T/ck" && mkfifo "$T/ck/ckpt_00000002.h5" || exit 99
expect 4 "checkpoint at step 2" "$T/ck/ckpt_00000002.h5 is a FIFO" -- "$T/d.h5" $m --ckpt-dir "$T/ck"
[ -p "$T/ck/ckpt_00000002.h5" ] || fail "the FIFO in --ckpt-dir was replaced"
ls "$T"/ck/*.tmp.* >/dev/null 2>&1 && fail "a temporary file was left in --ckpt-dir"

# 4. --save through a symlink: the weights go to the link's target (new or
# existing), in the target's directory; the link stays a link
mkdir "$T/sub" && ln -s sub/new.h5 "$T/to-new.h5" || exit 99
run1 "$T/d.h5" $m --save "$T/to-new.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "--save through a dangling symlink"; }
[ -L "$T/to-new.h5" ] && [ -f "$T/sub/new.h5" ] || { ls -la "$T" "$T/sub"; fail "--save through a symlink: not written to its target"; }
"$WEIGHTS_CMP" "$T/sub/new.h5" "$T/w0.h5" 0 >/dev/null || fail "--save through a symlink: other weights"
cp "$T/d.h5" "$T/sub/old.h5" && ln -s sub/old.h5 "$T/to-old.h5" || exit 99
run1 "$T/d.h5" $m --save "$T/to-old.h5" >"$T/o" 2>&1 || { cat "$T/o"; fail "--save through a symlink to a file"; }
[ -L "$T/to-old.h5" ] || fail "--save replaced the symlink itself"
"$WEIGHTS_CMP" "$T/sub/old.h5" "$T/w0.h5" 0 >/dev/null || fail "--save through a symlink: the target was not replaced"
ls "$T"/*.tmp.* "$T"/sub/*.tmp.* >/dev/null 2>&1 && fail "a temporary file was left"
echo "ok: --save through symlinks writes their targets"

# 5. temporary files: NAME.tmp.HOST.PID.  A dead process's of this host is
# removed (with a line); another host's, a live process's (this shell), another
# target's and another pattern's are kept (a warning for those of our target)
host=$(uname -n | tr -c 'A-Za-z0-9.\n-' '_')
dead=$(sh -c 'echo $$')
kill -0 "$dead" 2>/dev/null && fail "pid $dead is still alive"
mkdir "$T/tmp" || exit 99
for f in w.h5.tmp.$host.$dead w.h5.tmp.elsewhere.example.$dead w.h5.tmp.$host.$$ x.h5.tmp.$host.$dead \
  w.h5.tmp.junk w.h5.tmp.$host.${dead}x; do
  echo partial >"$T/tmp/$f"
done
run1 "$T/d.h5" $m --save "$T/tmp/w.h5" >"$T/o" 2>"$T/e" || { cat "$T/o" "$T/e"; fail "--save with temporary files"; }
grep -qF -- "--save $T/tmp/w.h5: removed 1 stale temporary file an interrupted save left" "$T/o" \
  || { cat "$T/o"; fail "the stale temporary file was not reported removed"; }
grep -qF -- "--save $T/tmp/w.h5: 2 temporary files of another run" "$T/e" \
  || { cat "$T/e"; fail "no warning about the kept temporary files"; }
[ -e "$T/tmp/w.h5.tmp.$host.$dead" ] && fail "the stale temporary file is still there"
for f in w.h5.tmp.elsewhere.example.$dead w.h5.tmp.$host.$$ x.h5.tmp.$host.$dead w.h5.tmp.junk \
  w.h5.tmp.$host.${dead}x; do
  [ "$(cat "$T/tmp/$f" 2>/dev/null)" = partial ] || fail "$f was removed or changed"
done
mkdir "$T/ck2" || exit 99
for f in ckpt_00000004.h5.tmp.$host.$dead ckpt_00000004.h5.tmp.elsewhere.$dead ckpt_00000004.h5.tmp.$host.$$; do
  echo partial >"$T/ck2/$f"
done
run1 "$T/d.h5" $m --ckpt-dir "$T/ck2" >"$T/o" 2>"$T/e" || { cat "$T/o" "$T/e"; fail "--ckpt-dir with temporary files"; }
grep -qF -- "--ckpt-dir $T/ck2: removed 1 temporary file an interrupted checkpoint write left" "$T/o" \
  || { cat "$T/o"; fail "--ckpt-dir: the stale temporary file was not reported removed"; }
grep -qF -- "--ckpt-dir $T/ck2: 2 temporary files of another run" "$T/e" || { cat "$T/e"; fail "--ckpt-dir: no warning"; }
[ "$(ls "$T/ck2" | wc -l)" -eq 3 ] && [ -f "$T/ck2/ckpt_00000002.h5" ] && [ -f "$T/ck2/ckpt_00000004.h5.tmp.$host.$$" ] \
  && [ -f "$T/ck2/ckpt_00000004.h5.tmp.elsewhere.$dead" ] \
  || { ls "$T/ck2"; fail "--ckpt-dir: expected the checkpoint and the two kept temporary files"; }
echo "ok: stale temporary files removed, those of other hosts, live processes and other names kept"

# 6. --init and --resume that are not regular files
expect 3 "--init $T/fifo is a FIFO" -- "$T/d.h5" $m --init "$T/fifo"
expect 3 "--resume $T/sub is a directory" -- "$T/d.h5" $m --resume "$T/sub"

# 7. NaN in an --init tensor; --freeze and --model that leave nothing to
# train, or name nothing
expect 3 "--init $T/nan-w.h5: dataset /model/layers.2.weight holds NaN at element 5 of 64" \
  -- "$T/d.h5" $m --init "$T/nan-w.h5"
expect 2 "--freeze ',' has an empty name" -- "$T/d.h5" $m --freeze ,
expect 2 "--freeze 'layers.0,,layers.2' has an empty name" -- "$T/d.h5" $m --freeze layers.0,,layers.2
expect 2 "--freeze layers.0,layers.2 freezes every parameter" -- "$T/d.h5" $m --freeze layers.0,layers.2
expect 2 "--model relu has no parameters to train" -- "$T/d.h5" $m --model relu
unchanged "$T/d.h5"

# 7b. a symbolic link loop as --ckpt-dir or --metrics: the loop named, not a
# missing parent directory
ln -s "$T/loop-b" "$T/loop-a" && ln -s "$T/loop-a" "$T/loop-b" || exit 99
expect 4 "cannot follow --ckpt-dir $T/loop-a: Too many levels of symbolic links" \
  "a loop of symbolic links" -- "$T/d.h5" $m --ckpt-dir "$T/loop-a"
grep -q "parent directory must exist" "$T/e" && fail "--ckpt-dir loop: blames the parent directory"
expect 4 "--metrics $T/loop-a: cannot open it" "a loop of symbolic links" -- "$T/d.h5" $m \
  --metrics "$T/loop-a"

# 7c. --resume auto over thousands of junk files named like checkpoints: the
# first three named, the rest counted in one line, a name ddptrain does not
# write (ckpt_30.h5) one warning, and the real checkpoint found
mkdir "$T/junk" || exit 99
run1 "$T/d.h5" $m --ckpt-dir "$T/junk" >/dev/null 2>&1 || fail "a checkpoint to resume"
i=10000
while [ $i -lt 13000 ]; do echo junk >"$T/junk/ckpt_000$i.h5"; i=$((i + 1)); done
echo junk >"$T/junk/ckpt_30.h5"
run1 "$T/d.h5" $m --steps 3 --ckpt-dir "$T/junk" --resume auto >"$T/o" 2>"$T/e" \
  || { cat "$T/e"; fail "--resume auto past 3000 junk files: exit $?"; }
[ "$(grep -c "warning" "$T/e")" -eq 5 ] || { head -20 "$T/e"; fail "3000 junk files: expected 5 warning lines, got $(grep -c warning "$T/e")"; }
grep -q "2997 more unreadable or damaged checkpoints in $T/junk skipped" "$T/e" \
  || { cat "$T/e"; fail "3000 junk files: no count of the rest"; }
grep -q "1 file in $T/junk named like a checkpoint but not as ddptrain names them (ckpt_30.h5) ignored" "$T/e" \
  || { cat "$T/e"; fail "ckpt_30.h5: not named once"; }
grep -q "No such file" "$T/e" && { cat "$T/e"; fail "ckpt_30.h5 looked up under another name"; }
grep -q "resume *$T/junk/ckpt_00000002.h5: step 2" "$T/o" || { cat "$T/o" "$T/e"; fail "3000 junk files: the real checkpoint not resumed"; }
echo "ok: 3000 junk files in --ckpt-dir: 5 warning lines, the checkpoint resumed"

# 8. ddptrain-prep: the file outgrows the file-size limit (EFBIG, as a full
# disk) while HDF5 flushes it at close: one line, exit 4, no crash at exit
prep="synthetic --classes 4 --features 12 --samples 600 --seed 3"
sh -c 'trap "" XFSZ; ulimit -f 32; exec "$@"' x "$DDPPREP" $prep -o "$T/big.h5" >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 4 ] || { cat "$T/e"; fail "ddptrain-prep over the file-size limit: exit $rc, expected 4"; }
[ "$(wc -l <"$T/e")" -eq 1 ] && grep -qF "writing $T/big.h5 failed (disk full or quota?)" "$T/e" \
  || { cat "$T/e"; fail "ddptrain-prep over the file-size limit: expected one error line"; }
ls "$T"/big.h5* >/dev/null 2>&1 && fail "ddptrain-prep over the file-size limit left a file"
echo "ok: ddptrain-prep, a write that fails at close: exit 4, one line, nothing left"

# 9. a full tmpfs (root, private mount namespace): the create fails at once
mnt=$T/mnt
mkdir "$mnt" || exit 99
if [ "$(id -u)" != 0 ] || ! unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs "$0"' "$mnt" 2>/dev/null; then
  ddp_skip DDP_REQUIRE_MOUNT "the full-disk cases need root and unshare -m / mount"
fi
T=$T m=$m prep=$prep mnt=$mnt DDPTRAIN=$DDPTRAIN DDPPREP=$DDPPREP unshare -m sh -c '. ./testenv.sh
  mount -t tmpfs -o size=64k tmpfs "$mnt" || exit 99
  dd if=/dev/zero of="$mnt/fill" bs=4k 2>/dev/null  # until the disk is full
  "$DDPPREP" $prep -o "$mnt/x.h5" >"$T/o1" 2>"$T/e1"; echo $? >"$T/rc1"
  mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $m --save "$mnt/w.h5" >"$T/o2" 2>"$T/e2"; echo $? >"$T/rc2"
  ls "$mnt" >"$T/left"
  umount "$mnt" && mount -t tmpfs -o size=16k tmpfs "$mnt" || exit 99
  "$DDPPREP" $prep -o "$mnt/z.h5" >"$T/o3" 2>"$T/e3"; echo $? >"$T/rc3"
  ls "$mnt" >"$T/left3"
  mkdir "$mnt/ck" && mount -o remount,ro "$mnt" || exit 99
  mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $m --ckpt-dir "$mnt/ck" >"$T/o4" 2>"$T/e4"; echo $? >"$T/rc4"
  mpirun_np 2 "$DDPTRAIN" "$T/d.h5" $m --ckpt-dir "$mnt/new" >"$T/o5" 2>"$T/e5"; echo $? >"$T/rc5"' \
  || fail "the full-disk namespace (exit $?)"
[ "$(cat "$T/rc1")" -eq 4 ] && [ "$(wc -l <"$T/e1")" -eq 1 ] && grep -qF "No space left on device" "$T/e1" \
  || { cat "$T/e1"; fail "ddptrain-prep on a full disk: expected exit 4 and one line"; }
[ "$(cat "$T/rc2")" -eq 4 ] && [ "$(grep -c "error:" "$T/e2")" -eq 1 ] && grep -qF "No space left on device" "$T/e2" \
  || { cat "$T/e2"; fail "--save on a full disk: expected exit 4 and one line"; }
grep -q "^step \|^done:" "$T/o2" && { cat "$T/o2"; fail "--save on a full disk: trained before failing"; }
[ "$(cat "$T/left")" = fill ] || { cat "$T/left"; fail "a full disk: a file was left behind"; }
echo "ok: a full disk: ddptrain-prep and --save exit 4 with one line and leave no file"
# 16 KiB for a 40 KiB deck: the 28 KiB chunk of /train/x fails to write when
# its dataset is closed (an error its writer ignored, which once left a
# "valid" deck of zeros): exit 4, one line, no file, a clean exit
[ "$(cat "$T/rc3")" -eq 4 ] && [ "$(wc -l <"$T/e3")" -eq 1 ] \
  && grep -qF "writing $mnt/z.h5 failed (disk full or quota?)" "$T/e3" \
  || { cat "$T/e3"; fail "ddptrain-prep, a chunk lost at a dataset's close: expected exit 4 and one line"; }
[ -z "$(cat "$T/left3")" ] || { cat "$T/left3"; fail "ddptrain-prep, a chunk lost: a file was left behind"; }
echo "ok: ddptrain-prep, a chunk that cannot be written when its dataset closes: exit 4, nothing left"
# a read-only file system: said so, for an existing --ckpt-dir and a new one
ddp_expect_error "$T/e4" "$(cat "$T/rc4")" 4 "--ckpt-dir on a read-only file system" \
  "cannot write in --ckpt-dir $mnt/ck: Read-only file system (a read-only file system: choose a directory on a writable one)"
ddp_expect_error "$T/e5" "$(cat "$T/rc5")" 4 "a new --ckpt-dir on a read-only file system" \
  "cannot create --ckpt-dir $mnt/new: Read-only file system (a read-only file system"
grep -q "parent directory must exist" "$T/e5" && fail "read-only --ckpt-dir: blames the parent directory"
echo "ok: --ckpt-dir on a read-only file system: the cause named"
echo ok
