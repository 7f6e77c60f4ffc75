"""The content-addressed export store: convert an image once, reuse the file everywhere.

An entry is one exported file, keyed by what determines its contents (:mod:`.keys`): the
image ID, the format, the compression preset, the options that change the bytes, and
imagekit's export format version. Layout under the root::

    entries/sha256/<hex>/<format>/<preset>-v<version>-<options hash>/
        image.sqsh | image.sif      the file (read-only; outputs are hard links to it)
        entry.json                  the key, sha256, bytes, created, tool, where it came from
    tmp/<key>@<owner>@<random>/     entries being written
    locks/<key>.lock                who is converting a key (its owner token)
    trash/                          entries being deleted
    holds/<key>@<uid>@<name>        readers that must not lose an entry (:mod:`.holds`)
    used/<key>@<uid>                readers' last use, where they may not touch the entry

so "every entry of this image in this format" is one directory listing. The entry
directory's mtime is its last use (LRU for ``gc``).

Who may publish (:mod:`.trust`). The store's publishers are root, the owner of its root
directory, and, in a shared store, the group ``entries/`` is writable by. Every hit checks
that nobody else could have written the entry, and that its bytes are the sha256 its
publisher recorded (:mod:`.verify`); anything else is not served, with a warning. A shared
store is read by everyone and written by its publishers only (``store init --shared``);
each user converts into a private store of their own (docs/export.md, "Who may
publish: the trust model").

Publication. An entry is built in ``tmp/`` on the store's own file system, its data and
``entry.json`` fsynced, and the whole directory renamed to its final name. ``rename(2)``
of a directory is atomic on a local file system, on NFS (one server operation) and on
Lustre (one MDS operation), and it fails with ENOTEMPTY/EEXIST when the final directory
already exists, so the first publisher wins and the others discard their copy. A reader
therefore sees either no entry or a complete one, whatever dies when.

Locking, and why correctness does not depend on it (:mod:`.locks`). Before converting, a
process takes ``locks/<key>.lock``; others wait for the entry to appear. The converter
touches the lock every ``HEARTBEAT`` seconds. A lock is broken when its owner is certainly
dead (same PID namespace on this boot, :func:`imagekit.util.leases.alive`), or, for any other
owner, when it has not been touched for ``lock_stale`` seconds (ages are measured against
the file system's clock). If the lock is ever wrong, the only cost is a second conversion:
the atomic publication still lets exactly one complete file become the entry.

Sweeping. ``tmp/`` directories, locks and ``trash/`` items name their owner; those of dead
owners of this PID namespace go at once, any other owner's after ``tmp_stale`` seconds
without a heartbeat. Every conversion and ``gc`` sweeps; nothing is ever followed through a
symbolic link. ``gc`` never evicts an entry with a live hold, nor anything still in
``tmp/``. Files already opened, and hard-linked outputs, survive eviction anyway.
"""

from __future__ import annotations

from imagekit.export.store.core import TMP_STALE, EntryGone, NotPublisher, Store, find, no_space
from imagekit.export.store.entries import META, Entry
from imagekit.export.store.holds import HOLD_MAX_AGE, HoldRefused
from imagekit.export.store.keys import ARTIFACT_OPTION, StoreKey, content_neutral, default_root
from imagekit.export.store.locks import HEARTBEAT, LOCK_STALE
from imagekit.export.store.delivery import link_or_copy, need_space
from imagekit.export.store.trust import Trust, UntrustedEntry, UntrustedStore

__all__ = ["ARTIFACT_OPTION", "Entry", "EntryGone", "HEARTBEAT", "HOLD_MAX_AGE",
           "HoldRefused", "LOCK_STALE", "META", "NotPublisher", "Store", "StoreKey", "TMP_STALE",
           "Trust", "UntrustedEntry", "UntrustedStore", "content_neutral", "default_root", "find",
           "link_or_copy", "need_space", "no_space"]
