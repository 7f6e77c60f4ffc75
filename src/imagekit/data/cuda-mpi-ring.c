/* imagekit-cuda-mpi-ring: does this MPI move GPU memory? The multi-node GPU job's first question,
 * which a host-memory ring cannot answer: a CUDA-aware build that is not CUDA-aware at run time
 * (UCX without its CUDA transports, a library loaded from the wrong prefix) crashes or corrupts
 * only when a device pointer reaches MPI.
 * Every rank takes a GPU (local rank modulo the GPUs it sees), sends BYTES (default 4 MiB) of device
 * memory to the next rank round the ring, checks on the host what arrived from the previous one,
 * then allreduces its rank number in device memory. Exit 0 only if all of it held.
 * Usage: mpirun|srun --mpi=pmix ... imagekit-cuda-mpi-ring [BYTES]
 *        imagekit-cuda-mpi-ring --built   (no GPU, no launcher: was it compiled against a CUDA-aware MPI?) */
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check(cudaError_t err, const char *what, int rank)
{
    if (err == cudaSuccess)
        return 0;
    fprintf(stderr, "imagekit-cuda-mpi-ring: rank %d: %s: %s\n", rank, what, cudaGetErrorString(err));
    return 1;
}

int main(int argc, char **argv)
{
    int rank, size, local = 0, ngpu = 0, bad = 0, len;
    if (argc > 1 && strcmp(argv[1], "--built") == 0) {
        /* What a host without a GPU can still tell: the MPI headers this was compiled against say the
         * library was configured with CUDA support (Open MPI's mpi-ext.h), and the CUDA runtime it links. */
        int runtime = 0;
        cudaRuntimeGetVersion(&runtime);
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
        printf("imagekit-cuda-mpi-ring: built against a CUDA-aware MPI (MPIX_CUDA_AWARE_SUPPORT 1), CUDA runtime %d\n",
               runtime);
        return 0;
#else
        printf("imagekit-cuda-mpi-ring: built against an MPI without CUDA support (no MPIX_CUDA_AWARE_SUPPORT), "
               "CUDA runtime %d\n", runtime);
        return 1;
#endif
    }
    long bytes = argc > 1 ? atol(argv[1]) : 4L << 20;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Comm node;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    if (bytes < 1 || bytes > (1L << 30)) {
        if (rank == 0)
            fprintf(stderr, "imagekit-cuda-mpi-ring: BYTES must be 1 to 1073741824, not %s\n", argv[1]);
        MPI_Finalize();
        return 2;
    }
#if defined(MPIX_CUDA_AWARE_SUPPORT)
    /* The library's own answer: built with CUDA and able to use it now. */
    if (!MPIX_Query_cuda_support()) {
        if (rank == 0)
            fprintf(stderr, "imagekit-cuda-mpi-ring: MPIX_Query_cuda_support() says this MPI cannot "
                            "take device memory at run time\n");
        bad = 1;
    }
#endif
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    if (check(cudaGetDeviceCount(&ngpu), "cudaGetDeviceCount", rank) || ngpu < 1) {
        fprintf(stderr, "imagekit-cuda-mpi-ring: rank %d on %s sees no GPU\n", rank, host);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    int gpu = local % ngpu;
    unsigned char *d_out = NULL, *d_in = NULL, *h_in = malloc((size_t)bytes);
    int *d_rank = NULL, *d_sum = NULL, sum = 0;
    if (h_in == NULL || check(cudaSetDevice(gpu), "cudaSetDevice", rank) ||
        check(cudaMalloc((void **)&d_out, (size_t)bytes), "cudaMalloc", rank) ||
        check(cudaMalloc((void **)&d_in, (size_t)bytes), "cudaMalloc", rank) ||
        check(cudaMalloc((void **)&d_rank, sizeof(int)), "cudaMalloc", rank) ||
        check(cudaMalloc((void **)&d_sum, sizeof(int)), "cudaMalloc", rank) ||
        check(cudaMemset(d_out, rank & 0xff, (size_t)bytes), "cudaMemset", rank) ||
        check(cudaMemset(d_in, 0xff ^ (rank & 0xff), (size_t)bytes), "cudaMemset", rank) ||
        check(cudaMemcpy(d_rank, &rank, sizeof(int), cudaMemcpyHostToDevice), "cudaMemcpy", rank) ||
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", rank))
        MPI_Abort(MPI_COMM_WORLD, 3);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Sendrecv(d_out, (int)bytes, MPI_BYTE, next, 7, d_in, (int)bytes, MPI_BYTE, prev, 7,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (check(cudaMemcpy(h_in, d_in, (size_t)bytes, cudaMemcpyDeviceToHost), "cudaMemcpy", rank))
        bad = 1;
    for (long i = 0; !bad && i < bytes; i++)
        if (h_in[i] != (prev & 0xff))
            bad = 1;
    MPI_Allreduce(d_rank, d_sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (check(cudaMemcpy(&sum, d_sum, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy", rank) ||
        sum != size * (size - 1) / 2)
        bad = 1;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, gpu) != cudaSuccess)
        strcpy(prop.name, "?");
    printf("imagekit-cuda-mpi-ring: rank %d of %d on %s, GPU %d (%s): %s\n", rank, size, host, gpu,
           prop.name, bad ? "FAILED" : "ok");
    fflush(stdout);
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("imagekit-cuda-mpi-ring: %d ranks, ring of %ld bytes of GPU memory and allreduce %s\n", size,
               bytes, any ? "FAILED" : "passed");
    cudaFree(d_out);
    cudaFree(d_in);
    cudaFree(d_rank);
    cudaFree(d_sum);
    free(h_in);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return any ? 1 : 0;
}
