# ddp_cuda.m4 -- CUDA toolkit (optional): nvcc, the runtime and cuBLAS; cuDNN
# (optional inside it) for the convolutions.
#
# --with-cuda[=DIR]  default "guess": nvcc on PATH, then /usr/local/cuda; not
#                    finding it is an error only when asked for explicitly.
# --without-cuda     CPU-only build.
# --with-cuda-arch=LIST  comma-separated sm_XX list (default sm_90); SASS for
#                    each, plus PTX of the newest so later GPUs can JIT it.
# --with-cudnn=DIR   cuDNN's prefix when it is not inside the toolkit (default:
#                    the toolkit's include/cudnn.h when there); --without-cudnn:
#                    the convolutions run as im2col + GEMM.  cuDNN is loaded
#                    with dlopen at run time (cuda/dnn.cu), never linked.
# _DDP_CUDA_PREFIX -- the toolkit prefix for a guessed $NVCC.  nvcc on PATH is
# often a link or wrapper in /usr/bin or /usr/local/bin, so its parent is not
# the toolkit: ask nvcc where it lives (--dryrun prints _HERE_), then follow
# links, then try $CUDA_HOME, $CUDA_PATH, /usr/local/cuda and /opt/cuda.  The first
# candidate holding include/cuda_runtime.h wins.
AC_DEFUN([_DDP_CUDA_PREFIX], [
  AC_MSG_CHECKING([for the CUDA toolkit prefix])
  ddp_nvcc_here=`"$NVCC" --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -n 1`
  ddp_nvcc_real=`readlink -f "$NVCC" 2>/dev/null`
  CUDA_DIR=
  for ddp_bin in "$ddp_nvcc_here" "${ddp_nvcc_real%/*}" "${NVCC%/*}" \
                 "${CUDA_HOME:+$CUDA_HOME/bin}" "${CUDA_PATH:+$CUDA_PATH/bin}" /usr/local/cuda/bin /opt/cuda/bin; do
    test -n "$ddp_bin" || continue
    ddp_dir=`AS_DIRNAME(["$ddp_bin"])`
    AS_IF([test -f "$ddp_dir/include/cuda_runtime.h"], [CUDA_DIR=$ddp_dir; break])
  done
  AC_MSG_RESULT([${CUDA_DIR:-not found}])
])

AC_DEFUN([DDP_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [build the CUDA compute backend (default: guess from nvcc on PATH or /usr/local/cuda)])],
    [], [with_cuda=guess])
  AC_ARG_WITH([cuda-arch],
    [AS_HELP_STRING([--with-cuda-arch=LIST], [GPU architectures, e.g. sm_80,sm_90 (default: sm_90 plus PTX)])],
    [], [with_cuda_arch=sm_90])
  AC_ARG_WITH([cudnn],
    [AS_HELP_STRING([--with-cudnn@<:@=DIR@:>@], [cuDNN for the CUDA backend's convolutions (default: used when the toolkit has cudnn.h)])],
    [], [with_cudnn=guess])
  AC_ARG_VAR([NVCC], [CUDA compiler])
  AC_ARG_VAR([NVCCFLAGS], [extra flags for nvcc (the C flags are never passed to nvcc)])

  ddp_have_cuda=no
  ddp_cuda_summary="no (--without-cuda)"
  CUDA_DIR= CUDA_CPPFLAGS= CUDA_LDFLAGS= CUDA_LIBS=
  AS_IF([test "x$with_cuda" != xno], [
    AS_CASE([$with_cuda],
      [guess|yes], [ddp_nvcc_given=$NVCC
                    AS_IF([test -z "$NVCC"], [AC_PATH_PROG([NVCC], [nvcc], [], [$PATH$PATH_SEPARATOR/usr/local/cuda/bin])])
                    AS_IF([test -n "$NVCC"], [_DDP_CUDA_PREFIX])
                    dnl nvcc finds its headers relative to where it was started: a
                    dnl link elsewhere cannot compile, so use the toolkit's own.
                    AS_IF([test -z "$ddp_nvcc_given" && test -n "$CUDA_DIR" && test -x "$CUDA_DIR/bin/nvcc"],
                          [NVCC="$CUDA_DIR/bin/nvcc"])],
      [AS_IF([test -z "$NVCC" && test -x "$with_cuda/bin/nvcc"], [NVCC="$with_cuda/bin/nvcc"])
       CUDA_DIR="$with_cuda"])
    ddp_cuda_ok=no
    AS_IF([test -n "$NVCC" && test -n "$CUDA_DIR"], [
      ddp_cuda_libdir="$CUDA_DIR/lib64"
      AS_IF([test -d "$ddp_cuda_libdir"], [], [ddp_cuda_libdir="$CUDA_DIR/lib"])
      CUDA_CPPFLAGS="-isystem $CUDA_DIR/include"
      CUDA_LDFLAGS="-L$ddp_cuda_libdir -Wl,-rpath,$ddp_cuda_libdir"
      ddp_save_CPPFLAGS=$CPPFLAGS ddp_save_LDFLAGS=$LDFLAGS ddp_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS" LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
      AC_CHECK_HEADERS([cuda_runtime.h cublas_v2.h], [ddp_cuda_ok=yes], [ddp_cuda_ok=no; break])
      AS_IF([test "x$ddp_cuda_ok" = xyes],
        [AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [], [ddp_cuda_ok=no])])
      AS_IF([test "x$ddp_cuda_ok" = xyes],
        [AC_CHECK_LIB([cublas], [cublasCreate_v2], [], [ddp_cuda_ok=no], [-lcudart])])
      AS_IF([test "x$ddp_cuda_ok" = xyes], [
        AC_COMPUTE_INT([ddp_cudart_version], [CUDART_VERSION], [[#include <cuda_runtime_api.h>]])
        AC_MSG_CHECKING([whether $NVCC compiles a kernel])
        printf '__global__ void ddp_probe(float *x) { x[[threadIdx.x]] = 0.0f; }\n' > conftest.cu
        AS_IF([$NVCC -c -o conftest.o conftest.cu >&AS_MESSAGE_LOG_FD 2>&1],
              [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); ddp_cuda_ok=no])
        rm -f conftest.cu conftest.o])
      CPPFLAGS=$ddp_save_CPPFLAGS LDFLAGS=$ddp_save_LDFLAGS LIBS=$ddp_save_LIBS
    ])
    AS_IF([test "x$ddp_cuda_ok" = xyes], [
      ddp_have_cuda=yes
      dnl cuBLAS is not linked into the programs: the backend loads it with
      dnl dlopen when a process binds a GPU (cuda/blas.cu); CUBLAS_LIBS is for
      dnl the programs that call it themselves (bench_gpu's cuBLAS-alone case).
      CUDA_LIBS="-lcudart -lstdc++ -ldl"
      CUBLAS_LIBS="-lcublas"
      dnl -gencode for every listed arch; PTX of the last one for forward compatibility.
      CUDA_GENCODE=
      ddp_last_arch=
      for ddp_arch in `echo "$with_cuda_arch" | tr ',' ' '`; do
        ddp_num=`echo "$ddp_arch" | sed 's/^sm_//; s/^compute_//'`
        AS_CASE([$ddp_num], [*[[!0-9a]]*|""], [AC_MSG_ERROR([--with-cuda-arch: '$ddp_arch' is not of the form sm_90])])
        CUDA_GENCODE="$CUDA_GENCODE -gencode arch=compute_$ddp_num,code=sm_$ddp_num"
        ddp_last_arch=$ddp_num
      done
      CUDA_GENCODE="$CUDA_GENCODE -gencode arch=compute_$ddp_last_arch,code=compute_$ddp_last_arch"
      ddp_cuda_major=`expr $ddp_cudart_version / 1000`
      ddp_cuda_minor=`expr \( $ddp_cudart_version % 1000 \) / 10`
      ddp_cuda_summary="$ddp_cuda_major.$ddp_cuda_minor in $CUDA_DIR (arch: $with_cuda_arch + PTX)"
      AC_DEFINE([HAVE_CUDA], [1], [Define to 1 to build the CUDA compute backend])
      AC_DEFINE_UNQUOTED([DDP_CUDA_ARCH], ["$with_cuda_arch"], [CUDA architectures compiled for])
      AC_DEFINE_UNQUOTED([DDP_CUBLAS_SONAME], ["libcublas.so.$ddp_cuda_major"],
        [the cuBLAS library the cuda backend loads (cuda/blas.cu)])
      AC_DEFINE_UNQUOTED([DDP_CUBLASLT_SONAME], ["libcublasLt.so.$ddp_cuda_major"],
        [the cuBLASLt library the cuda backend loads when it can (cuda/blas.cu)])
      dnl cuDNN: its header at build time; the library by its soname at run time
      CUDNN_CPPFLAGS= ddp_cudnn_major=
      ddp_cudnn_summary="im2col (no cuDNN)"
      AS_IF([test "x$with_cudnn" != xno], [
        AS_CASE([$with_cudnn], [guess|yes], [], [CUDNN_CPPFLAGS="-isystem $with_cudnn/include"])
        ddp_save_CPPFLAGS=$CPPFLAGS
        CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS $CUDNN_CPPFLAGS"
        AC_CHECK_HEADER([cudnn.h], [
          AC_COMPUTE_INT([ddp_cudnn_major], [CUDNN_MAJOR], [[#include <cudnn_version.h>]], [ddp_cudnn_major=])])
        CPPFLAGS=$ddp_save_CPPFLAGS
        AS_IF([test -n "$ddp_cudnn_major" && test "$ddp_cudnn_major" -ge 8], [
          AC_DEFINE([HAVE_CUDNN], [1], [Define to 1 when the CUDA backend's convolutions may use cuDNN])
          AC_DEFINE_UNQUOTED([DDP_CUDNN_SONAME], ["libcudnn.so.$ddp_cudnn_major"],
            [the cuDNN library the cuda backend loads when it can (cuda/dnn.cu)])
          ddp_cudnn_summary="cuDNN $ddp_cudnn_major"
        ], [
          AS_IF([test "x$with_cudnn" != xguess],
            [AC_MSG_ERROR([cuDNN was asked for (--with-cudnn=$with_cudnn) but cudnn.h (version 8 or later) was not found; pass its prefix or --without-cudnn])])
          CUDNN_CPPFLAGS=
        ])
      ])
      ddp_cuda_summary="$ddp_cuda_summary, convolutions: $ddp_cudnn_summary"
    ], [
      AS_IF([test "x$with_cuda" != xguess],
        [AC_MSG_ERROR([CUDA was asked for (--with-cuda=$with_cuda) but nvcc, cuda_runtime.h, cublas_v2.h,
  libcudart or libcublas was not found, or $NVCC could not compile a kernel (see config.log).  Load your site's CUDA module, pass
  --with-cuda=DIR (the toolkit prefix holding bin/nvcc), or use --without-cuda.])])
      ddp_cuda_summary="not found (CPU-only build; pass --with-cuda=DIR to enable)"
    ])
  ])
  AC_SUBST([CUDA_DIR])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDNN_CPPFLAGS])
  AC_SUBST([CUDA_LDFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([CUBLAS_LIBS])
  AC_SUBST([CUDA_GENCODE])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$ddp_have_cuda" = xyes])
])
