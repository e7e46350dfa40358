# ddp_c11.m4 -- the C dialect: C11 with GNU extensions.  Every C file is
# compiled with $(DDP_STD_CFLAGS) (common.am), so the flag set here is the
# flag checked here.
#
# DDP_C11 compiles the C11 that ddptrain uses (_Static_assert, _Atomic and
# <stdatomic.h>, _Thread_local, anonymous structs and unions) with the flags
# in the order the build gives them ($CC $(AM_CFLAGS) $CFLAGS) and stops
# when that fails.  AC_PROG_CC's own probing is not enough: autoconf 2.69
# does not probe C11 at all (ac_cv_prog_cc_c11 stays empty), and 2.70's
# probe checks neither atomics nor thread-local storage.
AC_DEFUN([DDP_C11], [
  AC_REQUIRE([AC_PROG_CC])
  DDP_STD_CFLAGS=-std=gnu11
  ddp_save_CFLAGS=$CFLAGS
  CFLAGS="$DDP_STD_CFLAGS $CFLAGS"
  AC_MSG_CHECKING([whether $CC $CFLAGS compiles C11 (_Static_assert, _Atomic, _Thread_local)])
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[
#if !defined __STDC_VERSION__ || __STDC_VERSION__ < 201112L
#error not C11
#endif
#ifdef __STDC_NO_ATOMICS__
#error no C11 atomics
#endif
#include <stdatomic.h>
#include <stdint.h>
_Static_assert(sizeof(uint64_t) == 8, "uint64_t has 8 bytes");
struct ddp_c11_probe {
    int kind;
    union { float f; int i; };
    struct { int lo, hi; };
};
static _Thread_local int ddp_c11_tls;
static _Atomic uint64_t ddp_c11_counter;]],
    [[struct ddp_c11_probe p = { .kind = 1, .f = 1.0f, .lo = 2 };
    atomic_fetch_add_explicit(&ddp_c11_counter, 1, memory_order_relaxed);
    ddp_c11_tls = p.kind + p.lo + p.hi + p.i;
    return (int)atomic_load(&ddp_c11_counter) + ddp_c11_tls;]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([$CC with "$CFLAGS" does not compile C11 (see config.log).
  ddptrain needs C11 with <stdatomic.h>: GCC >= 4.9, Clang >= 3.6 or a
  compiler of the same age behind the MPI wrapper.  Load a newer compiler
  module, point the wrapper at one (Open MPI: OMPI_CC=gcc-12; MPICH and
  Intel MPI: MPICH_CC=...), or remove a -std= option from CFLAGS.])])
  CFLAGS=$ddp_save_CFLAGS
  AC_SUBST([DDP_STD_CFLAGS])
])
