dnl ddp_dnnl.m4 -- DDP_DNNL: oneDNN (libdnnl) for the CPU backend's
dnl convolutions (src/compute/cpu/cpu_dnnl.c).  Optional: used when found
dnl (--with-dnnl=check, the default), required with --with-dnnl, left out
dnl with --without-dnnl (the backend's own im2col/Winograd convolutions).
dnl Sets HAVE_DNNL, DNNL_CPPFLAGS, DNNL_LDFLAGS, DNNL_LIBS, ddp_dnnl_summary.
AC_DEFUN([DDP_DNNL], [
  AC_ARG_WITH([dnnl],
    [AS_HELP_STRING([--with-dnnl@<:@=DIR@:>@], [oneDNN for the CPU convolutions (default: use it when found)])],
    [], [with_dnnl=check])
  DNNL_CPPFLAGS= DNNL_LDFLAGS= DNNL_LIBS=
  ddp_have_dnnl=no
  ddp_dnnl_summary="no (--without-dnnl: ddptrain's own convolutions)"
  AS_IF([test "x$with_dnnl" != xno], [
    AS_IF([test "x$with_dnnl" != xyes && test "x$with_dnnl" != xcheck],
      [DNNL_CPPFLAGS="-I$with_dnnl/include" DNNL_LDFLAGS="-L$with_dnnl/lib -Wl,-rpath,$with_dnnl/lib"])
    ddp_save_CPPFLAGS=$CPPFLAGS ddp_save_LDFLAGS=$LDFLAGS ddp_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $DNNL_CPPFLAGS" LDFLAGS="$LDFLAGS $DNNL_LDFLAGS" LIBS="-ldnnl -lgomp $LIBS"
    AC_CHECK_HEADER([dnnl.h],
      [AC_MSG_CHECKING([for dnnl_convolution_forward_desc_init in libdnnl (oneDNN 2.x)])
       AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <dnnl.h>
void omp_set_num_threads(int n);]],
          [[dnnl_convolution_desc_t d; omp_set_num_threads(1);
            return (int)dnnl_convolution_forward_desc_init(&d, dnnl_forward_training,
              dnnl_convolution_direct, 0, 0, 0, 0, 0, 0, 0);]])],
         [ddp_have_dnnl=yes], [])
       AC_MSG_RESULT([$ddp_have_dnnl])])
    CPPFLAGS=$ddp_save_CPPFLAGS LDFLAGS=$ddp_save_LDFLAGS LIBS=$ddp_save_LIBS
    AS_IF([test "x$ddp_have_dnnl" = xyes],
      [DNNL_LIBS="-ldnnl -lgomp"
       AC_DEFINE([HAVE_DNNL], [1], [oneDNN for the CPU convolutions])
       ddp_dnnl_summary="yes (-ldnnl: the CPU convolutions)"],
      [AS_IF([test "x$with_dnnl" != xcheck],
         [AC_MSG_ERROR([oneDNN 2.x not found: Debian/Ubuntu: apt-get install libdnnl-dev (or scripts/install-deps), pass --with-dnnl=DIR, or --without-dnnl])])
       ddp_dnnl_summary="no (not found: ddptrain's own convolutions; apt-get install libdnnl-dev)"])])
  AC_SUBST([DNNL_CPPFLAGS])
  AC_SUBST([DNNL_LDFLAGS])
  AC_SUBST([DNNL_LIBS])
])
