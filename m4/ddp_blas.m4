# ddp_blas.m4 -- a CBLAS with cblas_sgemm (required); OpenBLAS preferred.
AC_DEFUN([DDP_BLAS], [
  AC_ARG_WITH([blas],
    [AS_HELP_STRING([--with-blas=LIBS], [link flags of a CBLAS library (default: OpenBLAS via pkg-config, then -lopenblas, -lcblas, -lblas)])],
    [], [with_blas=guess])
  AS_IF([test "x$with_blas" = xno], [AC_MSG_ERROR([a BLAS is required; --without-blas is not supported])])
  BLAS_CPPFLAGS= BLAS_LIBS=
  AS_IF([test "x$with_blas" != xguess && test "x$with_blas" != xyes],
    [BLAS_LIBS="$with_blas"],
    [PKG_CHECK_MODULES([OPENBLASPC], [openblas],
       [BLAS_CPPFLAGS="$OPENBLASPC_CFLAGS" BLAS_LIBS="$OPENBLASPC_LIBS"], [:])])

  ddp_save_CPPFLAGS=$CPPFLAGS ddp_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $BLAS_CPPFLAGS"
  AS_IF([test -n "$BLAS_LIBS"],
    [LIBS="$BLAS_LIBS $LIBS"
     AC_CHECK_FUNC([cblas_sgemm], [], [AC_MSG_ERROR([cblas_sgemm not found in $BLAS_LIBS])])],
    [AC_SEARCH_LIBS([cblas_sgemm], [openblas cblas blas], [BLAS_LIBS="$LIBS"; BLAS_LIBS="${BLAS_LIBS% $ddp_save_LIBS}"],
       [AC_MSG_ERROR([no CBLAS with cblas_sgemm found.
  Install OpenBLAS (Debian/Ubuntu: apt-get install libopenblas-dev), load your site's
  BLAS module, or pass --with-blas="-L/path -lyourblas".])])])
  AC_CHECK_HEADER([cblas.h], [], [AC_MSG_ERROR([cblas.h not found (Debian/Ubuntu: apt-get install libopenblas-dev)])])
  AC_CHECK_FUNCS([openblas_set_num_threads openblas_get_config])
  AS_IF([test "x$ac_cv_func_openblas_get_config" = xyes], [ddp_blas_summary="OpenBLAS ($BLAS_LIBS)"],
        [ddp_blas_summary="CBLAS ($BLAS_LIBS)"])
  CPPFLAGS=$ddp_save_CPPFLAGS LIBS=$ddp_save_LIBS
  AC_SUBST([BLAS_CPPFLAGS])
  AC_SUBST([BLAS_LIBS])
])
