# zero_deck.sh -- sourced by test_zero.sh and test_zero_emu.sh (after
# testenv.sh and ddp_tmpdir): their deck ($T/d.h5), model and options
# ($common, $adamw), and same A B WHAT, which fails unless the weights
# saved in $T/A.h5 and $T/B.h5 are bit-identical.
"$DDPPREP" synthetic --classes 6 --features 24 --samples 1200 --seed 3 -o "$T/d.h5" >/dev/null \
  || fail "ddptrain-prep synthetic"
common="--steps 12 --log-every 0 --eval-every 0 --seed 11 --weight-decay 1e-4 \
  --model linear:48,relu,bn,dropout:0.25,linear:32,gelu,bn,linear:auto \
  --bucket-cap-mb 0.004 --first-bucket-mb 0.002"
adamw="--optimizer adamw --lr 0.003"
same() {
  "$WEIGHTS_CMP" "$T/$2.h5" "$T/$1.h5" 0 >"$T/cmp" || { cat "$T/cmp"; fail "$3: not the bits of $1"; }
}
