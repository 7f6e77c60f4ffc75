/* imagekit-mpi-ring: is this launch wired right? It needs no GPU and no Python.
 * Every rank says where it runs; each sends BYTES (default 1 MiB: large enough for Open MPI's
 * shared-memory single copy between ranks of a node) to the next rank round the ring and checks
 * what it got from the previous one; an allreduce checks that every rank took part.
 * Exit 0 only if all of it held.   Usage: mpirun|srun --mpi=pmix ... imagekit-mpi-ring [BYTES] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size, len, sum = 0, bad = 0;
    long bytes = argc > 1 ? atol(argv[1]) : 1L << 20;
    char host[MPI_MAX_PROCESSOR_NAME];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    if (bytes < 1 || bytes > (1L << 30)) {
        if (rank == 0)
            fprintf(stderr, "imagekit-mpi-ring: BYTES must be 1 to 1073741824, not %s\n", argv[1]);
        MPI_Finalize();
        return 2;
    }
    unsigned char *out = malloc((size_t)bytes), *in = malloc((size_t)bytes);
    if (out == NULL || in == NULL)
        MPI_Abort(MPI_COMM_WORLD, 3);
    memset(out, rank & 0xff, (size_t)bytes);
    memset(in, 0xff ^ (rank & 0xff), (size_t)bytes);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Sendrecv(out, (int)bytes, MPI_BYTE, next, 7, in, (int)bytes, MPI_BYTE, prev, 7,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (long i = 0; i < bytes; i++)
        if (in[i] != (prev & 0xff)) {
            bad = 1;
            break;
        }
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size * (size - 1) / 2)
        bad = 1;
    printf("imagekit-mpi-ring: rank %d of %d on %s (pid %d): %s\n", rank, size, host, (int)getpid(),
           bad ? "FAILED" : "ok");
    fflush(stdout);
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("imagekit-mpi-ring: %d ranks, ring of %ld bytes and allreduce %s\n", size, bytes,
               any ? "FAILED" : "passed");
    free(out);
    free(in);
    MPI_Finalize();
    return any ? 1 : 0;
}
