# ddp_zlib.m4 -- zlib, for the gzip'd IDX files that ddptrain-prep reads
# (MNIST and Fashion-MNIST ship as .gz).  Optional: without it ddptrain-prep
# reads plain (gunzip'd) IDX files only.  --with-zlib=DIR looks in
# DIR/include and DIR/lib; --with-zlib makes it required.
AC_DEFUN([DDP_ZLIB], [
  AC_ARG_WITH([zlib],
    [AS_HELP_STRING([--with-zlib@<:@=DIR@:>@], [zlib for gzip'd IDX input of ddptrain-prep (default: use it if found)])],
    [], [with_zlib=check])
  ZLIB_CPPFLAGS= ZLIB_LDFLAGS= ZLIB_LIBS=
  ddp_have_zlib=no
  AS_IF([test "x$with_zlib" != xno], [
    AS_IF([test "x$with_zlib" != xyes && test "x$with_zlib" != xcheck],
      [ZLIB_CPPFLAGS="-I$with_zlib/include" ZLIB_LDFLAGS="-L$with_zlib/lib -Wl,-rpath,$with_zlib/lib"])
    ddp_save_CPPFLAGS=$CPPFLAGS ddp_save_LDFLAGS=$LDFLAGS ddp_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $ZLIB_CPPFLAGS" LDFLAGS="$LDFLAGS $ZLIB_LDFLAGS"
    AC_CHECK_HEADER([zlib.h],
      [AC_CHECK_LIB([z], [gzopen], [ddp_have_zlib=yes ZLIB_LIBS=-lz])])
    CPPFLAGS=$ddp_save_CPPFLAGS LDFLAGS=$ddp_save_LDFLAGS LIBS=$ddp_save_LIBS
    AS_IF([test "x$ddp_have_zlib" = xno && test "x$with_zlib" != xcheck],
      [AC_MSG_ERROR([zlib not found (Debian/Ubuntu: apt-get install zlib1g-dev), or pass --with-zlib=DIR or --without-zlib])])
  ])
  AS_IF([test "x$ddp_have_zlib" = xyes],
    [AC_DEFINE([HAVE_ZLIB], [1], [zlib is available (gzip'd IDX input)])
     ddp_zlib_summary="yes ($ZLIB_LIBS)"],
    [ddp_zlib_summary="no (ddptrain-prep idx reads plain IDX files only)"])
  AC_SUBST([ZLIB_CPPFLAGS])
  AC_SUBST([ZLIB_LDFLAGS])
  AC_SUBST([ZLIB_LIBS])
])
