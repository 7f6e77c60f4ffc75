"""The squashfs compression presets, by name: what ``--preset`` picks for a .sqsh and a SIF; the tools
that read a tar stream, by name; and ``SOURCE_DATE_EPOCH``, read once for every export.

Pure data, so that the format table (:mod:`imagekit.export.formats`), the export store and the Pyxis
importer know the names and the defaults without loading the converters; :mod:`imagekit.export.squash`
turns a preset into each tool's options and runs the tool. The choices follow the measurements of
bench/compression.py (docs/export.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from imagekit.util.errors import UsageError

KIB = 1 << 10
MIB = 1 << 20

# squashfs-tools cannot read a tar stream before 4.5: `mksquashfs - OUT -tar` and sqfstar
# both arrived then and write identical bytes for identical options. sqfstar (4.5.1 to 4.7)
# takes the value of any -X compressor option for the output file name, so presets with a
# level or an algorithm go through `mksquashfs -tar`; tar2sqfs (squashfs-tools-ng) is the
# fallback where squashfs-tools is too old.
TOOLS = ("sqfstar", "mksquashfs", "tar2sqfs")


@dataclass(frozen=True)
class Preset:
    """A squashfs compression choice, written once and translated for each tool."""

    compressor: str                  # gzip, lzo, lz4, zstd, xz; "none" stores everything raw
    block: int = 128 * KIB           # data block (and fragment) size
    level: int | None = None         # -Xcompression-level (gzip, zstd, lzo1x_999); None: tool's
    algorithm: str | None = None     # lzo variant (-Xalgorithm); None: lzo1x_999
    hc: bool = False                 # lz4 high compression
    raw_data: bool = False           # -noD: data blocks stored uncompressed (Enroot's default)
    tailends: bool = True            # pack the tail of files > block into fragments
    exportable: bool = False         # NFS export table (mksquashfs's default for a directory)
    summary: str = field(default="", compare=False)

    @property
    def compressor_options(self) -> bool:
        """Whether the preset needs -X options (which sqfstar cannot parse)."""
        return self.level is not None or self.algorithm is not None or self.hc

    def label(self) -> str:
        """Short description, e.g. ``zstd-3 1M`` or ``lzo(lzo1x_999) 128K raw data``."""
        if self.compressor == "none":
            return "uncompressed"
        name = self.compressor
        if self.algorithm:
            name += f"({self.algorithm})"
        if self.level is not None:
            name += f"-{self.level}"
        if self.hc:
            name += "hc"
        size = f"{self.block // MIB}M" if self.block % MIB == 0 else f"{self.block // KIB}K"
        return f"{name} {size}" + (" raw data" if self.raw_data else "")

    def mksquashfs_args(self) -> list[str]:
        """Options for mksquashfs/sqfstar (-X ones only where needed)."""
        if self.compressor == "none":
            args = ["-noI", "-noD", "-noF", "-noX"]
        else:
            args = ["-comp", self.compressor]
            if self.level is not None:
                args += ["-Xcompression-level", str(self.level)]
            if self.algorithm is not None:
                args += ["-Xalgorithm", self.algorithm]
            if self.hc:
                args.append("-Xhc")
            if self.raw_data:
                args.append("-noD")
        if self.block != 128 * KIB:
            args += ["-b", str(self.block)]
        # Reading tar, both tools pack tail ends and write no export table unless told.
        if not self.tailends:
            args.append("-no-tailends")
        if self.exportable:
            args.append("-exports")
        return args

    def tar2sqfs_args(self) -> list[str]:
        """Options for tar2sqfs, which always compresses data (``raw_data`` is approximated)."""
        if self.compressor == "none":
            raise UsageError("tar2sqfs cannot write an uncompressed image",
                             "install squashfs-tools >= 4.5, or pick a compressed preset")
        extra = []
        if self.level is not None:
            extra.append(f"level={self.level}")
        if self.algorithm is not None:
            extra.append(f"algorithm={self.algorithm}")
        if self.hc:
            extra.append("hc")
        args = ["-c", self.compressor, "-b", str(self.block)]
        if extra:   # the defaults (zstd 15, gzip 9, lzo1x_999 8) are squashfs-tools' too
            args += ["-X", ",".join(extra)]
        if not self.tailends:
            args.append("--no-tail-packing")
        if self.exportable:
            args.append("--exportable")
        return args


# The presets a site picks by name (docs/export.md has the measurements behind them).
PRESETS: dict[str, Preset] = {
    # Enroot's default ENROOT_SQUASH_OPTIONS exactly: `mksquashfs DIR OUT -all-root -comp lzo
    # -noD`, so lzo1x_999 level 8 on metadata and fragments, raw data, and mksquashfs's
    # directory defaults (no tail-end packing, an NFS export table).
    "enroot": Preset("lzo", raw_data=True, tailends=False, exportable=True,
                     summary="Enroot's own options (lzo1x_999 metadata and fragments, raw data)"),
    "none": Preset("none", summary="nothing compressed"),
    "gzip": Preset("gzip", summary="gzip-9, 128 KiB blocks: Apptainer's SIF default"),
    # The SIF default (bench/export.py --to sif): zlib's own default level, which every reader of gzip
    # squashfs reads; half gzip-9's CPU for 0.2 % more bytes on debian-mpi (docs/export.md).
    "gzip-6": Preset("gzip", level=6, summary="gzip-6, 128 KiB blocks: the SIF default"),
    "zstd": Preset("zstd", summary="zstd-15, 128 KiB blocks: Apptainer's -comp zstd"),
    # The default (bench/compression.py): a third of the enroot preset's CPU, two thirds of its
    # size, and 128 KiB blocks, which squashfuse and the kernel read faster than 1 MiB ones.
    "fast": Preset("zstd", level=3, summary="zstd-3, 128 KiB blocks: the default"),
    # Pyxis's caching importer uses zstd with 1 MiB blocks; matching a parallel file system's
    # stripe size cuts metadata round trips when many nodes read one file, and unsquashfs
    # (enroot create) reads big blocks fastest.
    "shared-fs": Preset("zstd", block=1 * MIB, level=3,
                        summary="zstd-3, 1 MiB blocks: many nodes reading one file"),
    # For registries and slow links: 10% smaller than shared-fs, 15x its export CPU.
    "small": Preset("zstd", block=1 * MIB, level=19, summary="zstd-19, 1 MiB blocks: smallest"),
}

# The default of `imagekit export --to enroot` and of the export store (set from the bench).
DEFAULT_PRESET = "fast"
DEFAULT_STORE_PRESET = DEFAULT_PRESET


def preset(name: str) -> Preset:
    """The preset called ``name``; UsageError listing the valid ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(f"unknown compression preset {name!r}",
                         f"use one of: {', '.join(PRESETS)}") from None


# A SIF's compression (``--to sif --preset``), the default first. gzip-6 and gzip: every Apptainer and
# Singularity reads them; gzip is Apptainer's own default (gzip-9), at twice gzip-6's CPU. zstd: zstd-15, as `apptainer build --mksquashfs-args "-comp zstd"`. fast: the .sqsh
# default's zstd-3 (PRESETS), for a site whose hosts read zstd squashfs (Apptainer >= 1.0 through
# squashfuse or a kernel with CONFIG_SQUASHFS_ZSTD); docs/export.md has its numbers against
# `apptainer build`.
SIF_COMPRESSIONS = ("gzip-6", "gzip", "zstd", "fast")
SIF_DEFAULT = SIF_COMPRESSIONS[0]
SIF_COMPRESSIONS_HINT = "use gzip-6 (default), gzip (gzip-9, as Apptainer), zstd, or fast (zstd-3, as the .sqsh default)"


def source_date_epoch(env: dict[str, str] | None = None) -> int | None:
    value = (env if env is not None else os.environ).get("SOURCE_DATE_EPOCH")
    if value in (None, ""):
        return None
    try:
        epoch = int(value)
    except ValueError:
        raise UsageError(f"SOURCE_DATE_EPOCH={value!r} is not an integer",
                         "set it to seconds since 1970, e.g. $(git log -1 --format=%ct)") from None
    if not 0 <= epoch < 2 ** 32:
        raise UsageError(f"SOURCE_DATE_EPOCH={epoch} is out of squashfs's 32-bit range")
    return epoch
