"""What every engine answers about one image: :class:`Image`, and the one "not found" error.

Both live here, below the engines, so that each engine module gives the same shape back and raises
the same class, and the package's ``__init__`` (which names the engines) imports neither back.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from imagekit.util.errors import EngineError, NotFoundError

# Docker's words: the default engine, and the one callers outside the engines raise this for.
LOCAL_STORE = "the local engine"
NOT_FOUND_HINT = "build it with `imagekit build STACK`, or `docker pull`/`docker load` it"


class ImageMissing(EngineError, NotFoundError):
    """The image is not in the engine's store: the one message, naming the image and the store, with the fix."""

    exit_code = NotFoundError.exit_code

    def __init__(self, ref: str, store: str = LOCAL_STORE, hint: str = NOT_FOUND_HINT) -> None:
        super().__init__(f"image {ref!r} not found in {store}", hint)
        self.ref = ref


@dataclass(frozen=True)
class Image:
    """What ``docker image inspect`` (or Podman's, in the same shape) says about one image."""

    ref: str                          # as asked for: a name, a tag or an id
    id: str                           # sha256:...
    labels: dict[str, str]
    size: int                         # bytes
    config: dict[str, Any]            # Env, Entrypoint, Cmd, WorkingDir, Volumes, Labels, ...
    attrs: dict[str, Any] = field(repr=False)   # the whole inspect document (Architecture, ...)
    # The engine's layer list (newest first, as ``docker history`` gives it); None where it has none.
    layers: Callable[[str], list[dict[str, Any]]] | None = field(default=None, repr=False, compare=False)

    def history(self) -> list[dict[str, Any]]:
        """The image's layers, newest first, as ``docker history`` lists them."""
        if self.layers is None:
            raise EngineError(f"the engine that gave {self.ref} keeps no layer history")
        return self.layers(self.id)


@dataclass(frozen=True)
class BuildCommand:
    """One image build as an engine's command line needs it; the image ID goes to ``iidfile``, untagged
    (build tags it after). ``cache_from``/``inline_cache``: BuildKit's registry cache (Docker only)."""

    context: str
    dockerfile: str
    target: str
    platform: str
    iidfile: str
    labels: Mapping[str, str] = field(default_factory=dict)
    no_cache: bool = False
    secrets: Mapping[str, str] = field(default_factory=dict)
    cache_from: Sequence[str] = ()
    inline_cache: bool = False


class ModuleEngine:
    """The part of an :class:`imagekit.engines.Engine` that is its module's functions of the same names
    (``module``: the engine module's ``__name__``). Each is looked up when called, so a test that replaces
    one (``monkeypatch``) replaces it here too. An engine class adds its attributes and what differs."""

    module: str

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(sys.modules[self.module], name)(*args, **kwargs)

    def inspect(self, ref: str) -> Image:
        return self._call("inspect", ref)

    def image_id(self, ref: str) -> str:
        return self._call("image_id", ref)

    def image_exists(self, ref: str) -> bool:
        return self._call("image_exists", ref)

    def tag(self, image: str, name: str) -> None:
        self._call("tag", image, name)

    def remove(self, *refs: str) -> None:
        self._call("remove", *refs)

    def throwaway(self, image: str, command: Sequence[str] = (), *, entrypoint: str | None = None,
                  options: Sequence[str] = (), idle: bool = False,
                  purpose: str = "tmp") -> contextlib.AbstractContextManager[str]:
        return self._call("throwaway", image, command, entrypoint=entrypoint, options=options, idle=idle,
                          purpose=purpose)

    def run_once(self, image: str, argv: Sequence[str], *,
                 timeout: float | None = None) -> subprocess.CompletedProcess:
        return self._call("run_once", image, argv, timeout=timeout)

    def build_argv(self, build: BuildCommand) -> list[str]:
        return self._call("build_argv", build)

    def build_env(self) -> dict[str, str]:
        return self._call("build_env")
