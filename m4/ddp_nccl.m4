# ddp_nccl.m4 -- NCCL (optional, needs CUDA): the GPU communication backend.
#
# --with-nccl[=DIR]  default "guess": next to the CUDA toolkit or in the system
#                    paths; an error only when asked for explicitly.
AC_DEFUN([DDP_NCCL], [
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl@<:@=DIR@:>@], [build the NCCL comm backend (default: guess; needs CUDA)])],
    [], [with_nccl=guess])
  ddp_have_nccl=no
  ddp_nccl_summary="no"
  NCCL_CPPFLAGS= NCCL_LDFLAGS= NCCL_LIBS=
  AS_IF([test "x$with_nccl" != xno], [
    AS_IF([test "x$ddp_have_cuda" != xyes], [
      AS_IF([test "x$with_nccl" != xguess],
            [AC_MSG_ERROR([--with-nccl needs the CUDA backend, which is not enabled (see --with-cuda)])])
      ddp_nccl_summary="no (needs CUDA)"
    ], [
      AS_CASE([$with_nccl],
        [guess|yes], [],
        [NCCL_CPPFLAGS="-isystem $with_nccl/include"
         AS_IF([test -d "$with_nccl/lib64"], [ddp_nccl_libdir="$with_nccl/lib64"], [ddp_nccl_libdir="$with_nccl/lib"])
         NCCL_LDFLAGS="-L$ddp_nccl_libdir -Wl,-rpath,$ddp_nccl_libdir"])
      ddp_save_CPPFLAGS=$CPPFLAGS ddp_save_LDFLAGS=$LDFLAGS ddp_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS $NCCL_CPPFLAGS" LDFLAGS="$LDFLAGS $CUDA_LDFLAGS $NCCL_LDFLAGS"
      ddp_nccl_ok=no
      AC_CHECK_HEADER([nccl.h],
        [AC_CHECK_LIB([nccl], [ncclCommInitRank], [ddp_nccl_ok=yes], [], [-lcudart])])
      AS_IF([test "x$ddp_nccl_ok" = xyes], [
        AC_COMPUTE_INT([ddp_nccl_code], [NCCL_VERSION_CODE], [[#include <nccl.h>]])])
      CPPFLAGS=$ddp_save_CPPFLAGS LDFLAGS=$ddp_save_LDFLAGS LIBS=$ddp_save_LIBS
      AS_IF([test "x$ddp_nccl_ok" = xyes], [
        ddp_have_nccl=yes
        NCCL_LIBS="-lnccl"
        ddp_nccl_summary="version code $ddp_nccl_code"
        AC_DEFINE([HAVE_NCCL], [1], [Define to 1 to build the NCCL comm backend])
      ], [
        AS_IF([test "x$with_nccl" != xguess],
          [AC_MSG_ERROR([NCCL was asked for (--with-nccl=$with_nccl) but nccl.h or libnccl was not found.
  Load your site's NCCL module or pass --with-nccl=DIR.])])
        ddp_nccl_summary="not found"
      ])
    ])
  ])
  AC_SUBST([NCCL_CPPFLAGS])
  AC_SUBST([NCCL_LDFLAGS])
  AC_SUBST([NCCL_LIBS])
  AM_CONDITIONAL([HAVE_NCCL], [test "x$ddp_have_nccl" = xyes])
])
