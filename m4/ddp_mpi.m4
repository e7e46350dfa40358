# ddp_mpi.m4 -- the MPI C compiler wrapper (required) and the launcher used by tests.
#
# DDP_PROG_MPICC: choose CC before AC_PROG_CC runs.  A user-supplied CC (e.g. a
# Cray `cc` or `mpiicx`) is kept and checked by DDP_MPI; otherwise mpicc is
# searched on PATH.
AC_DEFUN([DDP_PROG_MPICC], [
  AC_ARG_VAR([MPICC], [MPI C compiler wrapper (default: mpicc on PATH)])
  AS_IF([test -z "$CC"], [
    AS_IF([test -z "$MPICC"], [AC_PATH_PROGS([MPICC], [mpicc mpiicx mpiicc], [])])
    AS_IF([test -z "$MPICC"], [AC_MSG_ERROR([no MPI C compiler wrapper (mpicc) found on PATH.
  ddptrain is built with the MPI compiler wrapper.  Install Open MPI:
    Debian/Ubuntu:  apt-get install libopenmpi-dev openmpi-bin
    on a cluster:   module load openmpi   (or your site's MPI module)
  or point configure at a wrapper:  ./configure CC=/path/to/mpicc])])
    CC="$MPICC"
  ])
])

# DDP_MPI: check that CC compiles and links MPI programs; find the launcher.
AC_DEFUN([DDP_MPI], [
  AC_MSG_CHECKING([whether $CC compiles and links MPI programs])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                                  [[MPI_Init(0, 0); MPI_Finalize();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([$CC cannot build MPI programs (mpi.h or libmpi not found).
  Install Open MPI (Debian/Ubuntu: apt-get install libopenmpi-dev openmpi-bin)
  or set CC to your MPI compiler wrapper.])])

  AC_MSG_CHECKING([which MPI library this is])
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#ifndef OMPI_MAJOR_VERSION
#error not open mpi
#endif]], [])],
    [ddp_mpi_flavor="Open MPI"],
    [AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#ifndef MPICH_VERSION
#error not mpich
#endif]], [])], [ddp_mpi_flavor="MPICH"], [ddp_mpi_flavor="other MPI"])])
  AC_MSG_RESULT([$ddp_mpi_flavor])

  dnl The launcher: prefer the one next to the compiler wrapper.
  AC_ARG_VAR([MPIEXEC], [MPI launcher used by make check (default: mpirun)])
  ddp_mpi_bindir=`AS_DIRNAME(["$(command -v ${CC%% *} 2>/dev/null || echo /)"])`
  AS_IF([test -z "$MPIEXEC"],
        [AC_PATH_PROGS([MPIEXEC], [mpirun mpiexec], [], [$ddp_mpi_bindir$PATH_SEPARATOR$PATH])])
  AS_IF([test "x$ddp_mpi_flavor" = "xOpen MPI"], [DDP_MPIEXEC_FLAVOR=openmpi], [DDP_MPIEXEC_FLAVOR=generic])
  AC_SUBST([DDP_MPIEXEC_FLAVOR])
  AC_DEFINE_UNQUOTED([DDP_MPI_FLAVOR], ["$ddp_mpi_flavor"], [MPI implementation])
])
