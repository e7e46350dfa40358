/* about.c -- `--version`: the program's version, the backends of its
 * registries and the libraries it was built with. */
#include "ddp_build.h"
#include "about.h"

#include <hdf5.h>
#include <sodium.h>
#include <mpi.h>
#include <string.h>

#include "comm.h"
#include "compute.h"
#include "version.h"
#ifdef HAVE_OPENBLAS_GET_CONFIG
char *openblas_get_config(void);
#endif
#ifdef HAVE_CUDA
#include "ddp_cuda.h"
#endif
#ifdef HAVE_NCCL
#include <nccl.h>
#endif

void ddp_print_version(FILE *f, const char *prog)
{
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, major = 0, minor = 0;
    MPI_Get_library_version(mpi, &len);
    char *nl = strchr(mpi, '\n');
    if (nl) *nl = '\0';
    MPI_Get_version(&major, &minor);
    unsigned hmaj, hmin, hrel;
    H5get_libversion(&hmaj, &hmin, &hrel);

    fprintf(f, "%s %s\n", prog, ddp_version());
    /* the registries (compute.c, comm.c): what this binary can run on */
    fprintf(f, "  compute backends :");
    for (int i = 0; i < compute_backend_count(); i++) fprintf(f, " %s", compute_backend_name(i));
    fprintf(f, "\n  comm backends    :");
    for (int i = 0; i < comm_backend_count(); i++) fprintf(f, " %s", comm_backend(i)->name);
    fprintf(f, "\n");
    fprintf(f, "  MPI              : %s (MPI %d.%d)\n", mpi, major, minor);
    fprintf(f, "  HDF5             : %u.%u.%u (%s)\n", hmaj, hmin, hrel, DDP_HDF5_KIND);
#ifdef HAVE_OPENBLAS_GET_CONFIG
    fprintf(f, "  BLAS             : %s\n", openblas_get_config());
#else
    fprintf(f, "  BLAS             : CBLAS\n");
#endif
    fprintf(f, "  libsodium        : %s (the watchdog's message authentication)\n",
            sodium_version_string());
#ifdef HAVE_CUDA
    {
        char cuda[128];
        ddp_cuda_version_string(cuda, sizeof cuda);
        fprintf(f, "  CUDA             : %s (kernels for %s)\n", cuda, DDP_CUDA_ARCH);
    }
#else
    fprintf(f, "  CUDA             : not built (configure --with-cuda)\n");
#endif
#ifdef HAVE_NCCL
    {
        int v = 0;
        ncclGetVersion(&v);
        fprintf(f, "  NCCL             : %d.%d.%d (built with %d.%d.%d)\n", v / 10000,
                (v % 10000) / 100, v % 100, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    }
#else
    fprintf(f, "  NCCL             : not built (configure --with-nccl)\n");
#endif
    fprintf(f, "  PMIx             : %s\n", DDP_PMIX_SUMMARY);
    fprintf(f, "  compiler         : %s\n", DDP_BUILD_CC);
#ifdef DDP_WITH_SANITIZERS
    fprintf(f, "  sanitizers       : ASan + UBSan (test build)\n");
#endif
    fprintf(f, "  configure        : %s\n", DDP_CONFIGURE_ARGS);
}
