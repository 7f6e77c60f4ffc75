"""imagekit: declarative HPC/AI container stacks built with HPCCM and Docker."""

__version__ = "0.1.0"
