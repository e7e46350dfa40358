# ddp_check.m4 -- the Check unit-test framework: needed by `make check` only.
AC_DEFUN([DDP_CHECK], [
  PKG_CHECK_MODULES([CHECK], [check >= 0.10],
    [ddp_have_check=yes ddp_check_summary="`$PKG_CONFIG --modversion check`"],
    [ddp_have_check=no ddp_check_summary="not found (make check will stop; Debian/Ubuntu: apt-get install check)"])
  AM_CONDITIONAL([HAVE_CHECK], [test "x$ddp_have_check" = xyes])
])
