"""The run side's copy of the components' forwarded environment prefixes.

launch/wrapper.py must not import the components (that loads HPCCM and every component module
into each launch), so launch.common keeps the union of their ``forward_env``; this test, on the
build side where both may be imported, fails when a component adds a prefix the launchers would
not forward.
"""

from __future__ import annotations

from imagekit.components import forwarded_env_prefixes
from imagekit.launch import common, wrapper


def test_the_launchers_forward_every_prefix_a_component_declares():
    assert common.COMPONENT_ENV_PREFIXES == forwarded_env_prefixes()


def test_the_rank_wrapper_matches_them():
    loop = wrapper.forward_loop("-e")
    for prefix in forwarded_env_prefixes():
        assert f"{prefix}*" in loop
