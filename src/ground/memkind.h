/* memkind.h -- the kind of a buffer's memory, which compute.h and comm.h
 * both speak of: the compute backend says what kind it allocates
 * (compute_ops_t.mem_kind), the comm backend is told the kind of every
 * buffer it is given (comm_register) and refuses kinds it cannot move. */
#ifndef DDP_MEMKIND_H
#define DDP_MEMKIND_H

typedef enum ddp_mem_kind {
    DDP_MEM_HOST,  /* ordinary process memory: the host may read and write it */
    DDP_MEM_DEVICE /* accelerator memory: only the backend's ops touch it */
} ddp_mem_kind_t;

static inline const char *ddp_mem_kind_name(ddp_mem_kind_t k)
{
    return k == DDP_MEM_HOST ? "host" : "device";
}

#endif
