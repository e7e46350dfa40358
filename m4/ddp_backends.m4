# ddp_backends.m4 -- the compute and comm backends a build contains.
#
# DDP_BACKEND(KIND, NAME, [CONDITION])
#   KIND is compute or comm.  NAME is built when the shell test CONDITION
#   holds (always without one) and is then appended to ddp_KIND_backends,
#   the list configure's summary prints.  The registries (src/compute/compute.c,
#   src/comm/comm.c) list the backends under the C macros of the same
#   conditions, and `ddptrain --version` prints the registries.
# DDP_BACKENDS_OUTPUT
#   DDP_COMPUTE_BACKENDS and DDP_COMM_BACKENDS, the two lists, as
#   substitutions (tests/testenv.sh) and as C strings (ddp_build.h), so the
#   tests check that configure, the registries and --version agree
#   (tests/e2e/test_cli.sh, check_kernels, check_comm).
AC_DEFUN([DDP_BACKEND], [
  m4_if([$3], [], [ddp_backend_ok=yes],
        [AS_IF([$3], [ddp_backend_ok=yes], [ddp_backend_ok=no])])
  AS_IF([test "x$ddp_backend_ok" = xyes],
        [ddp_$1_backends="${ddp_$1_backends:+$ddp_$1_backends }$2"])
])

AC_DEFUN([DDP_BACKENDS_OUTPUT], [
  DDP_COMPUTE_BACKENDS=$ddp_compute_backends
  DDP_COMM_BACKENDS=$ddp_comm_backends
  AC_SUBST([DDP_COMPUTE_BACKENDS])
  AC_SUBST([DDP_COMM_BACKENDS])
  AC_DEFINE_UNQUOTED([DDP_COMPUTE_BACKENDS], ["$ddp_compute_backends"],
                     [compute backends built in (the registry in src/compute/compute.c)])
  AC_DEFINE_UNQUOTED([DDP_COMM_BACKENDS], ["$ddp_comm_backends"],
                     [comm backends built in (the registry in src/comm/comm.c)])
])
