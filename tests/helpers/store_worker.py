"""One process asking the export store for one key, for the concurrency and kill tests.

    python store_worker.py ROOT IMAGE_ID GO_FILE COUNTER_FILE SIZE [hang]

Waits until GO_FILE exists (so that all workers start together), then calls
``get_or_create`` with a slow ``make`` that appends its pid to COUNTER_FILE and writes
SIZE bytes; ``hang`` stops half-way and sleeps (to be killed). Prints the entry as JSON, with
how many lookups the process made and how many files it hashed in full.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

from imagekit.export.store import Store, verify


def main() -> None:
    root, image_id, go, counter, size = sys.argv[1:6]
    hang = sys.argv[6:] == ["hang"]
    store = Store.open(root)
    key = store.key(image_id, "enroot", "test")
    counts = {"lookups": 0, "hashed": 0}
    lookup, sha256_file = store.lookup, verify.sha256_file

    def counted_lookup(k):
        counts["lookups"] += 1
        return lookup(k)

    def counted_hash(path):
        counts["hashed"] += 1
        return sha256_file(path)

    store.lookup = counted_lookup
    verify.sha256_file = counted_hash

    def make(path):
        with open(counter, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        chunks = int(size) // 65536
        with open(path, "wb") as out:
            for i in range(chunks):
                out.write(bytes([i % 251]) * 65536)
                out.flush()
                if hang and i == chunks // 2:
                    time.sleep(3600)
                time.sleep(0.002)   # a slow conversion: the other workers arrive while it runs

    while not os.path.exists(go):
        time.sleep(0.01)
    entry, created = store.get_or_create(key, make)
    data = entry.path.read_bytes()
    print(json.dumps({"path": str(entry.path), "created": created, "bytes": len(data),
                      "sha256": hashlib.sha256(data).hexdigest(), "recorded": entry.sha256, **counts}))


if __name__ == "__main__":
    main()
