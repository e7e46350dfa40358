# ddp_hdf5.m4 -- HDF5 (required), serial or parallel build.
#
# --with-hdf5=DIR looks in DIR/include and in DIR/lib64 or DIR/lib (the one
# holding libhdf5; lib64 first, as RPM-based systems and CMake builds install
# there); otherwise pkg-config (`hdf5`, Debian's serial flavour) and then
# plain -lhdf5 are tried.
AC_DEFUN([DDP_HDF5], [
  AC_ARG_WITH([hdf5],
    [AS_HELP_STRING([--with-hdf5=DIR], [HDF5 installation prefix (default: pkg-config, then system)])],
    [], [with_hdf5=guess])
  AS_IF([test "x$with_hdf5" = xno], [AC_MSG_ERROR([HDF5 is required; --without-hdf5 is not supported])])

  HDF5_CPPFLAGS= HDF5_LDFLAGS= HDF5_LIBS=
  AS_IF([test "x$with_hdf5" != xguess && test "x$with_hdf5" != xyes],
    [AC_MSG_CHECKING([for the HDF5 library directory in $with_hdf5])
     ddp_hdf5_libdir=
     for ddp_dir in "$with_hdf5/lib64" "$with_hdf5/lib"; do
       for ddp_lib in "$ddp_dir"/libhdf5.so* "$ddp_dir"/libhdf5.a "$ddp_dir"/libhdf5.dylib; do
         AS_IF([test -f "$ddp_lib"], [ddp_hdf5_libdir=$ddp_dir; break 2])
       done
     done
     AC_MSG_RESULT([${ddp_hdf5_libdir:-none (no libhdf5 in lib64 or lib)}])
     AS_IF([test -z "$ddp_hdf5_libdir"],
       [AC_MSG_ERROR([--with-hdf5=$with_hdf5: no libhdf5 in $with_hdf5/lib64 or $with_hdf5/lib.
  Pass the HDF5 installation prefix: the directory holding include/hdf5.h
  and lib64/ or lib/ (for a module: the directory above the bin/ of h5cc).])])
     HDF5_CPPFLAGS="-I$with_hdf5/include"
     HDF5_LDFLAGS="-L$ddp_hdf5_libdir -Wl,-rpath,$ddp_hdf5_libdir"
     HDF5_LIBS="-lhdf5"],
    [PKG_CHECK_MODULES([HDF5PC], [hdf5],
       [HDF5_CPPFLAGS="$HDF5PC_CFLAGS" HDF5_LIBS="$HDF5PC_LIBS"],
       [HDF5_LIBS="-lhdf5"])])

  ddp_save_CPPFLAGS=$CPPFLAGS ddp_save_LDFLAGS=$LDFLAGS ddp_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $HDF5_CPPFLAGS" LDFLAGS="$LDFLAGS $HDF5_LDFLAGS" LIBS="$HDF5_LIBS $LIBS"
  AC_CHECK_HEADER([hdf5.h], [],
    [AC_MSG_ERROR([hdf5.h not found.
  Install HDF5 (Debian/Ubuntu: apt-get install libhdf5-dev hdf5-tools),
  `module load hdf5` on a cluster, or pass --with-hdf5=DIR.])])
  AC_MSG_CHECKING([for H5Fopen in $HDF5_LIBS])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <hdf5.h>]], [[H5Fopen("x", H5F_ACC_RDONLY, H5P_DEFAULT);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no]); AC_MSG_ERROR([cannot link HDF5 ($HDF5_LDFLAGS $HDF5_LIBS); pass --with-hdf5=DIR])])
  AC_MSG_CHECKING([whether HDF5 is a parallel build])
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <hdf5.h>
#ifndef H5_HAVE_PARALLEL
#error serial
#endif]], [])], [ddp_hdf5_kind=parallel], [ddp_hdf5_kind=serial])
  AC_MSG_RESULT([$ddp_hdf5_kind])
  AC_MSG_CHECKING([HDF5 version])
  AC_COMPUTE_INT([ddp_h5maj], [H5_VERS_MAJOR], [[#include <hdf5.h>]])
  AC_COMPUTE_INT([ddp_h5min], [H5_VERS_MINOR], [[#include <hdf5.h>]])
  AC_COMPUTE_INT([ddp_h5rel], [H5_VERS_RELEASE], [[#include <hdf5.h>]])
  AC_MSG_RESULT([$ddp_h5maj.$ddp_h5min.$ddp_h5rel])
  AS_IF([test "$ddp_h5maj" -lt 1 || { test "$ddp_h5maj" -eq 1 && test "$ddp_h5min" -lt 10; }],
        [AC_MSG_ERROR([HDF5 >= 1.10 is required (found $ddp_h5maj.$ddp_h5min.$ddp_h5rel)])])
  CPPFLAGS=$ddp_save_CPPFLAGS LDFLAGS=$ddp_save_LDFLAGS LIBS=$ddp_save_LIBS

  ddp_hdf5_summary="$ddp_h5maj.$ddp_h5min.$ddp_h5rel ($ddp_hdf5_kind)"
  AC_DEFINE_UNQUOTED([DDP_HDF5_KIND], ["$ddp_hdf5_kind"], [serial or parallel HDF5])
  AC_SUBST([HDF5_CPPFLAGS])
  AC_SUBST([HDF5_LDFLAGS])
  AC_SUBST([HDF5_LIBS])
])
