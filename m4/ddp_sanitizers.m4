# ddp_sanitizers.m4 -- --enable-sanitizers: AddressSanitizer + UndefinedBehaviorSanitizer.
AC_DEFUN([DDP_SANITIZERS], [
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers], [build with ASan and UBSan (for test builds)])],
    [], [enable_sanitizers=no])
  ddp_sanitizers_summary=no
  AS_IF([test "x$enable_sanitizers" = xyes], [
    SAN_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    ddp_save_CFLAGS=$CFLAGS ddp_save_LDFLAGS=$LDFLAGS
    CFLAGS="$CFLAGS $SAN_FLAGS" LDFLAGS="$LDFLAGS $SAN_FLAGS"
    AC_MSG_CHECKING([whether $CC supports $SAN_FLAGS])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])], [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no]); AC_MSG_ERROR([--enable-sanitizers: $CC does not support ASan/UBSan])])
    CFLAGS=$ddp_save_CFLAGS LDFLAGS=$ddp_save_LDFLAGS
    ddp_sanitizers_summary="ASan + UBSan"
    AC_DEFINE([DDP_WITH_SANITIZERS], [1], [Define to 1 in builds with ASan and UBSan])
  ])
  AC_SUBST([SAN_FLAGS])
  AM_CONDITIONAL([ENABLE_SANITIZERS], [test "x$enable_sanitizers" = xyes])
])
