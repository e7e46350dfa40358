# ddp_pmix.m4 -- PMIx: detected and reported.  ddptrain does not link libpmix
# itself; what matters is that the MPI library talks PMIx, so that
# `srun --mpi=pmix ./ddptrain` can wire up the ranks under Slurm.
AC_DEFUN([DDP_PMIX], [
  AC_ARG_WITH([pmix],
    [AS_HELP_STRING([--with-pmix=DIR], [PMIx installation to report (default: pkg-config)])],
    [], [with_pmix=guess])
  ddp_pmix_summary="not found"
  AS_IF([test "x$with_pmix" != xno], [
    AS_IF([test "x$with_pmix" != xguess && test "x$with_pmix" != xyes],
      [AS_IF([test -f "$with_pmix/include/pmix_version.h"],
             [ddp_pmix_summary="found in $with_pmix"],
             [AC_MSG_ERROR([--with-pmix=$with_pmix: $with_pmix/include/pmix_version.h not found])])],
      [PKG_CHECK_MODULES([PMIXPC], [pmix],
         [ddp_pmix_summary="PMIx `$PKG_CONFIG --modversion pmix`"], [:])])
  ])
  dnl Does the MPI library support PMIx launch (srun --mpi=pmix)?
  AC_PATH_PROG([OMPI_INFO], [ompi_info], [], [$ddp_mpi_bindir$PATH_SEPARATOR$PATH])
  AS_IF([test -n "$OMPI_INFO"], [
    AC_MSG_CHECKING([whether Open MPI was built with PMIx])
    AS_IF([$OMPI_INFO --parsable 2>/dev/null | grep -qi 'pmix'],
      [AC_MSG_RESULT([yes]); ddp_pmix_summary="$ddp_pmix_summary; Open MPI has PMIx (srun --mpi=pmix)"],
      [AC_MSG_RESULT([no]); ddp_pmix_summary="$ddp_pmix_summary; Open MPI without PMIx (use mpirun inside Slurm jobs)"])
  ])
  AS_IF([test "x$with_pmix" = xyes && test "x$ddp_pmix_summary" = "xnot found"],
        [AC_MSG_ERROR([--with-pmix given but PMIx was not found (Debian/Ubuntu: apt-get install libpmix-dev)])])
  AC_DEFINE_UNQUOTED([DDP_PMIX_SUMMARY], ["$ddp_pmix_summary"], [PMIx detection result])
])
