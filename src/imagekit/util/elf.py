"""The libraries an ELF shared object names (DT_NEEDED), read from the file: no ldd, no binutils.

Preflight reads a host library a site means to bind into an image (HPE's libfabric) without running
it: ``ldd`` would resolve it against the host's libraries, not the image's. Only what that needs is
parsed: the ELF header, the program headers (PT_LOAD, PT_DYNAMIC) and the dynamic section's
DT_NEEDED/DT_STRTAB entries (System V ABI, "Dynamic Section"), for 32- and 64-bit files of either
byte order.
"""

from __future__ import annotations

import struct
from pathlib import Path

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB = 0, 1, 5


class NotElf(ValueError):
    """The file is not an ELF object this reader understands (the message says why)."""


def needed(path: str | Path) -> list[str]:
    """The DT_NEEDED names of the ELF file at ``path``, in order; [] for a file with no dynamic section."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or len(data) < 52:
        raise NotElf(f"{path} is not an ELF file")
    wide = {1: False, 2: True}.get(data[4])
    order = {1: "<", 2: ">"}.get(data[5])
    if wide is None or order is None:
        raise NotElf(f"{path}: unknown ELF class or byte order")
    if wide:
        phoff, = struct.unpack_from(order + "Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 0x36)
        ph_fmt, dyn_fmt = order + "IIQQQQQQ", order + "qQ"
    else:
        phoff, = struct.unpack_from(order + "I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 0x2A)
        ph_fmt, dyn_fmt = order + "IIIIIIII", order + "iI"
    loads, dynamic = [], None
    for i in range(phnum):
        fields = struct.unpack_from(ph_fmt, data, phoff + i * phentsize)
        if wide:
            p_type, _flags, offset, vaddr, _paddr, filesz = fields[:6]
        else:
            p_type, offset, vaddr, _paddr, filesz = fields[:5]
        if p_type == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return []
    entries, strtab = [], None
    size = struct.calcsize(dyn_fmt)
    for at in range(dynamic[0], dynamic[0] + dynamic[1] - size + 1, size):
        tag, value = struct.unpack_from(dyn_fmt, data, at)
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            entries.append(value)
        elif tag == DT_STRTAB:
            strtab = value
    if strtab is None:
        raise NotElf(f"{path}: a dynamic section without a string table")
    base = next((off + strtab - vaddr for vaddr, off, filesz in loads if vaddr <= strtab < vaddr + filesz), None)
    if base is None:
        raise NotElf(f"{path}: the string table lies outside every loaded segment")
    return [data[base + i:data.index(b"\0", base + i)].decode(errors="replace") for i in entries]
