# ddp_sodium.m4 -- libsodium, for the watchdog's keyed MACs (HMAC-SHA-512-256
# over every message between the ranks and rank 0's hub) and its per-job
# secret (randombytes_buf).  Required: without it anyone who can reach the
# hub's port could stop or blind a job.  pkg-config first; --with-sodium=DIR
# looks in DIR/include and DIR/lib.
AC_DEFUN([DDP_SODIUM], [
  AC_ARG_WITH([sodium],
    [AS_HELP_STRING([--with-sodium=DIR], [libsodium for the watchdog's authenticated messages (required)])],
    [], [with_sodium=check])
  AS_IF([test "x$with_sodium" = xno],
    [AC_MSG_ERROR([libsodium is required (the watchdog authenticates every message with it); --without-sodium is not supported])])
  SODIUM_CPPFLAGS= SODIUM_LDFLAGS= SODIUM_LIBS=
  ddp_have_sodium=no
  AS_IF([test "x$with_sodium" != xyes && test "x$with_sodium" != xcheck],
    [SODIUM_CPPFLAGS="-I$with_sodium/include" SODIUM_LDFLAGS="-L$with_sodium/lib -Wl,-rpath,$with_sodium/lib" SODIUM_LIBS=-lsodium],
    [PKG_CHECK_MODULES([SODIUM], [libsodium >= 1.0.12],
      [SODIUM_CPPFLAGS=$SODIUM_CFLAGS],
      [SODIUM_LIBS=-lsodium])])
  ddp_save_CPPFLAGS=$CPPFLAGS ddp_save_LDFLAGS=$LDFLAGS ddp_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $SODIUM_CPPFLAGS" LDFLAGS="$LDFLAGS $SODIUM_LDFLAGS" LIBS="$SODIUM_LIBS $LIBS"
  AC_CHECK_HEADER([sodium.h],
    [AC_MSG_CHECKING([for crypto_auth in libsodium])
     AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <sodium.h>]],
        [[unsigned char k[crypto_auth_KEYBYTES], t[crypto_auth_BYTES];
          randombytes_buf(k, sizeof k); return crypto_auth(t, k, 1, k);]])],
       [ddp_have_sodium=yes], [])
     AC_MSG_RESULT([$ddp_have_sodium])])
  CPPFLAGS=$ddp_save_CPPFLAGS LDFLAGS=$ddp_save_LDFLAGS LIBS=$ddp_save_LIBS
  AS_IF([test "x$ddp_have_sodium" = xno],
    [AC_MSG_ERROR([libsodium not found (the watchdog authenticates its messages with it): Debian/Ubuntu: apt-get install libsodium-dev (or scripts/install-deps), or pass --with-sodium=DIR])])
  ddp_sodium_summary="yes (`echo $SODIUM_LIBS`)"
  AC_SUBST([SODIUM_CPPFLAGS])
  AC_SUBST([SODIUM_LDFLAGS])
  AC_SUBST([SODIUM_LIBS])
])
