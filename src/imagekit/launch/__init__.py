"""Multi-node launch, composed from objects, and the preflight that runs before it.

A launch is a :mod:`workload` (what runs), a scheduler (:mod:`schedulers`: this host, Slurm,
Kubernetes), a rank starter (:mod:`starters`; one module each) and a container runtime
(:mod:`runtimes`), composed once by :mod:`plan` from a target's row (:mod:`targets`):

- ``slurm``: sbatch scripts, ``srun --mpi=pmix`` with Pyxis, Apptainer, Enroot or Docker ranks
- ``mpirun``: the host's Open MPI starts one container per rank (no Slurm)
- ``inside_out``: sshd worker containers, mpirun in the first (Docker, or over Slurm)
- ``mpijob``: a Kubeflow MPIJob manifest
- ``preflight``: host vs image checks, shared by all of them
"""
