# ddp_pthread.m4 -- POSIX threads for the loader thread (-pthread with GCC/Clang).
AC_DEFUN([DDP_PTHREAD], [
  ddp_save_CFLAGS=$CFLAGS
  CFLAGS="$CFLAGS -pthread"
  AC_MSG_CHECKING([whether $CC accepts -pthread])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <pthread.h>]], [[pthread_create(0, 0, 0, 0);]])],
    [AC_MSG_RESULT([yes]); PTHREAD_CFLAGS=-pthread PTHREAD_LIBS=-pthread],
    [AC_MSG_RESULT([no]); PTHREAD_CFLAGS= PTHREAD_LIBS=-lpthread])
  CFLAGS=$ddp_save_CFLAGS
  AC_SUBST([PTHREAD_CFLAGS])
  AC_SUBST([PTHREAD_LIBS])
])
