"""Who owns an inode and who may write it, in the words refusals use (``owner root, group ci, mode 0775``)."""

from __future__ import annotations

import functools
import grp
import os
import pwd
import stat


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


@functools.lru_cache(maxsize=256)
def private_group(gid: int, uid: int) -> bool:
    """Is ``gid`` the user private group of ``uid`` (named after it, its primary group, no listed
    members)? Group-write by such a group is the owner's own: RHEL gives users umask 002 with one."""
    try:
        user, group = pwd.getpwuid(uid), grp.getgrgid(gid)
    except KeyError:
        return False
    return user.pw_gid == gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def describe(st: os.stat_result) -> str:
    return f"owner {user_name(st.st_uid)}, group {group_name(st.st_gid)}, mode {stat.S_IMODE(st.st_mode):04o}"
