"""Multi-node launchers (one module each) and the preflight that runs before them.

- ``slurm``: sbatch scripts, ``srun --mpi=pmix`` with Pyxis, Apptainer, Enroot or Docker ranks
- ``mpirun``: the host's Open MPI starts one container per rank (no Slurm)
- ``inside_out``: sshd worker containers, mpirun in the first (Docker, or over Slurm)
- ``mpijob``: a Kubeflow MPIJob manifest
- ``preflight``: host vs image checks, shared by all of them
"""
