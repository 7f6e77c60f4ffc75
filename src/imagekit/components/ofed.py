"""RDMA user space: DOCA OFED, MLNX OFED, or the distro's inbox rdma-core.

The flavor decides the source: doca/mlnx come from NVIDIA's repos (they follow
``arch``: x86_64 or arm64-sbsa); inbox uses the distro's rdma-core packages.
``doca_ofed`` is the default for upstream: its repos are signed-by and it is the
current NVIDIA distribution. DOCA on apt-based bases is installed by
:func:`doca_apt` (one RUN that leaves no repository, key, gnupg or wget behind);
MLNX OFED and rpm-based bases use HPCCM's blocks.
"""

from __future__ import annotations

import re

from imagekit import checks
from imagekit.components import _blocks
from imagekit.components._base import Component
from imagekit.util.schema import Option

# The fabric tools every image gets: ib_write_bw and friends, rping/ucmatose (ibv_devinfo comes with
# ibverbs-utils). infiniband-diags (ibstat, ibnetdiscover, perfquery) is asked for apart: Debian's
# package depends on the full perl, 47 MB of the 53.5 MB the three added to debian-mpi's runtime.
INBOX_TOOLS = ["perftest", "rdmacm-utils"]
DIAGS_TOOLS = ["infiniband-diags"]
# The first DOCA release with a repository tree for each distro that came out after DOCA 2.0: DOCA 2.7.0
# (mid 2024) added Ubuntu 24.04, which DOCA 2.5/2.6 predate. Distros not listed are not judged.
DOCA_FIRST = {"ubuntu24": (2, 7, 0)}
# The first NVIDIA RDMA user space that supports each ConnectX generation, by flavor: DOCA 2.9 (LTS) says
# it "does not support ConnectX-8", which DOCA 2.10 added (DOCA release notes); MLNX OFED ended with the
# 24.10 LTS, before ConnectX-8. Inbox rdma-core's mlx5 provider matches devices by driver, not generation.
NIC_GENERATIONS = ("cx4", "cx5", "cx6", "cx7", "cx8")
DOCA_FOR_NIC = {"cx8": (2, 10, 0)}
# Ceilings: the last DOCA release line that supports each older generation (major, minor). DOCA 2.9.x release
# notes (2.9.2, 2.9.4 "2024 LTS"): "DOCA 2.9.0 (and its LTS branch) is the final software version to support
# NVIDIA ConnectX-4 device. Starting January '25, ConnectX-4 will no longer be supported by future DOCA-Host
# releases." (fourth CUDA review, J5: DGX-1's four ConnectX-4 with DOCA 3.2).
DOCA_LAST_FOR_NIC = {"cx4": (2, 9)}
DOCA_LTS_FOR_NIC = {"cx4": "2.9.4"}
MLNX_FOR_NIC: dict[str, tuple[int, ...] | None] = {"cx8": None}
RUNTIME_PACKAGES = ("ibverbs-providers", "ibverbs-utils", "libibumad3", "libibverbs1", "librdmacm1")
# HPCCM's doca_ofed set for apt-based distros.
DEVEL_PACKAGES = ("ibverbs-providers", "ibverbs-utils", "libibmad-dev", "libibmad5", "libibumad-dev", "libibumad3",
                  "libibverbs-dev", "libibverbs1", "librdmacm-dev", "librdmacm1")
DOCA_REPO = "https://linux.mellanox.com/public/repo/doca"
DOCA_KEY = f"{DOCA_REPO}/GPG-KEY-Mellanox.pub"
DOCA_ARCH = {"x86_64": "x86_64", "aarch64": "arm64-sbsa"}
# Where the key and the repository line live during the one RUN that uses them. apt reads an
# ASCII-armoured key from a ``.asc`` signed-by file, so no gnupg is needed to dearmor it, and apt's
# own apt-helper fetches it, so no wget either; /tmp lets apt's unprivileged _apt user write it.
DOCA_KEYFILE = "/tmp/imagekit-doca-key.asc"
DOCA_LIST = "/etc/apt/sources.list.d/imagekit-doca.list"


def doca_apt(stack, version: str, packages: list[str]) -> list:
    """One apt RUN that installs ``packages`` from DOCA ``version``'s repository for ``stack``'s base.

    The key and the repository line exist only for this RUN: the image keeps no NVIDIA repository
    (a later ``apt-get update`` would reach it, or fail offline) and no gnupg or wget (HPCCM's
    doca_ofed installs both and leaves its repository behind). ``ca-certificates`` stays: apt
    needs it for the https repository, and the nvidia/cuda bases ship it anyway.
    """
    # The repository tree is named after the Ubuntu release; Debian bases render as the Ubuntu
    # of their generation, as HPCCM's block did.
    distro = stack.base.hpccm_distro
    tree = f"{DOCA_REPO}/{version}/{distro[:-2]}{distro[-2:]}.04/{DOCA_ARCH[stack.base.arch]}/"
    return _blocks.apt_run(stack, [
        "apt-get update -y",
        "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates",
        f"/usr/lib/apt/apt-helper download-file {DOCA_KEY} {DOCA_KEYFILE}",
        f"echo 'deb [signed-by={DOCA_KEYFILE}] {tree} ./' > {DOCA_LIST}",
        "apt-get update -y",
        "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends " + " ".join(sorted(set(packages))),
        f"rm -f {DOCA_LIST} {DOCA_KEYFILE}",
    ], f"DOCA OFED {version} (the repository is used for this step only)")


class Ofed(Component):
    name = "ofed"
    summary = "RDMA user space: doca | mlnx (NVIDIA) or inbox (distro rdma-core)"
    order = 10
    provides = ("rdma",)
    sources = ("distro", "upstream")
    options = {
        "flavor": Option(str, "inbox", "doca | mlnx | inbox", choices=("doca", "mlnx", "inbox")),
        # On by default: an HPC image without ib_write_bw or ibv_devinfo leaves a site nothing to
        # triage a fabric with. perftest and rdmacm-utils add about 6 MB to debian-mpi's runtime.
        "tools": Option(bool, True, "add perftest and rdmacm-utils (ib_write_bw, ib_read_lat, rping)"),
        "diags": Option(bool, False, "add infiniband-diags (ibstat, ibnetdiscover, perfquery); Debian's "
                                     "depends on the full perl (+47 MB)"),
        "nics": Option(list, [], "ConnectX generations the image must drive (" + ", ".join(NIC_GENERATIONS)
                       + "): DOCA before 2.10 and MLNX OFED have no ConnectX-8, DOCA after 2.9 LTS no ConnectX-4",
                       item_type=str,
                       pattern="|".join(NIC_GENERATIONS), pattern_help="one of " + ", ".join(NIC_GENERATIONS)),
    }
    distro_packages = ("ibverbs-providers", "ibverbs-utils", "libibverbs1", "librdmacm1")
    distro_devel_packages = ("libibverbs-dev", "librdmacm-dev")
    distro_note = "RDMA: inbox rdma-core"
    distro_versions = {"debian12": "44.0", "debian13": "56.1", "debian11": "33.2", "ubuntu22": "39.0", "ubuntu24": "50.0",
                       "ubuntu20": "28.0"}

    @property
    def source(self) -> str:
        return "distro" if self.opts["flavor"] == "inbox" else "upstream"

    def configure(self) -> None:
        given = self.opts.get("source")
        if self.where is not None and "source" in self.where and given != self.source:
            self.error("source", f"flavor {self.opts['flavor']!r} implies `source: {self.source}`",
                       "drop `source:`; the flavor decides it")
        super().configure()

    def check_stack(self) -> None:
        if self.opts.get("flavor") == "mlnx" and self.stack.base.arch == "aarch64" \
                and self.stack.base.distro.startswith("ubuntu24"):
            self.error("flavor", "MLNX OFED has no ubuntu24 aarch64 build", "use `flavor: doca`")
        first = DOCA_FIRST.get(self.stack.base.distro)
        if self.opts.get("flavor") == "doca" and first and self.opts.get("version"):
            have = tuple(int(x) for x in re.findall(r"\d+", self.version)[:3])
            if have < first:
                wanted = ".".join(map(str, first))
                self.error("version", f"DOCA {self.version} predates {self.stack.base.distro}: NVIDIA's DOCA "
                           f"repository has no {self.stack.base.distro} tree before DOCA {wanted}",
                           f'use DOCA "{wanted}" or newer ("2.9.1" LTS; "2.10.0" or later for ConnectX-8)')

        self._check_nics()

    def _check_nics(self) -> None:
        flavor, have = self.opts.get("flavor"), tuple(int(x) for x in re.findall(r"\d+", self.version)[:3])
        for nic in self.opts.get("nics") or []:
            if flavor == "doca" and nic in DOCA_FOR_NIC and have < DOCA_FOR_NIC[nic]:
                wanted = ".".join(map(str, DOCA_FOR_NIC[nic]))
                self.error("version", f"DOCA {self.version} does not support ConnectX-{nic[2:]} (`nics: [{nic}]`): "
                           f"DOCA added it in {wanted} (DOCA 2.9 LTS: \"does not support ConnectX-8\")",
                           f'use DOCA "{wanted}" or newer ("3.2.0"), or drop {nic} from nics')
            if flavor == "doca" and nic in DOCA_LAST_FOR_NIC and have[:2] > DOCA_LAST_FOR_NIC[nic]:
                last = ".".join(map(str, DOCA_LAST_FOR_NIC[nic]))
                self.error("version", f"DOCA {self.version} does not support ConnectX-{nic[2:]} (`nics: [{nic}]`): "
                           f"DOCA {last} (LTS) is the last release line that does (DOCA {last} release notes: \"the "
                           f"final software version to support ConnectX-{nic[2:]}\")",
                           f'use DOCA "{DOCA_LTS_FOR_NIC[nic]}" ({last} LTS), `flavor: inbox` (the distro\'s '
                           f"rdma-core drives mlx5 devices of every generation), or drop {nic} from nics")
            if flavor == "mlnx" and nic in MLNX_FOR_NIC:
                self.error("flavor", f"MLNX OFED has no ConnectX-{nic[2:]} support (it ended with 24.10 LTS)",
                           'use `flavor: doca` with version "3.2.0"')

    def _tools(self) -> list[str]:
        return (INBOX_TOOLS if self.opts["tools"] else []) + (DIAGS_TOOLS if self.opts["diags"] else [])

    def _doca_apt(self) -> bool:
        return self.opts["flavor"] == "doca" and self.stack.base.family == "deb"

    def building_blocks(self) -> list:
        from hpccm.building_blocks import doca_ofed, mlnx_ofed

        if self._doca_apt():
            return doca_apt(self.stack, self.version, [*DEVEL_PACKAGES, *self._tools()])
        if self.opts["flavor"] == "doca":
            return [doca_ofed(version=self.version)]
        return [mlnx_ofed(version=self.version)]

    def runtime(self) -> list:
        if self.source == "distro":
            return super().runtime()
        from hpccm.building_blocks import doca_ofed, mlnx_ofed

        # HPCCM's runtime twin reinstalls everything (headers included): the runtime stage takes the
        # user-space libraries and the mlx5 provider from the same repo, nothing to build with.
        packages = [*RUNTIME_PACKAGES, *self._tools()]
        if self._doca_apt():
            return doca_apt(self.stack, self.version, packages)
        if self.opts["flavor"] == "doca":
            return [doca_ofed(version=self.version, packages=packages)]
        return [mlnx_ofed(version=self.version, packages=packages)]

    def packages(self, devel: bool) -> list[str]:
        return super().packages(devel) + self._tools()

    def labels(self) -> dict[str, str]:
        return {"flavor": self.opts["flavor"], **({"nics": ",".join(self.opts["nics"])} if self.opts.get("nics") else {})}

    def checks(self) -> list:
        return [
            checks.library("ofed.libibverbs", "libibverbs.so.1"),
            checks.run("ofed.mlx5", "the mlx5 verbs provider is installed",
                       "ls /usr/lib/*/libibverbs/libmlx5-rdmav*.so /usr/lib64/libibverbs/libmlx5-rdmav*.so "
                       "2>/dev/null | grep -q mlx5"),
            # `ibv_devinfo -l` prints "<n> HCA(s) found:" then one name a line; names vary (mlx5_0, or
            # rdma-core's persistent ibp*/rocep* names), so count devices rather than match names.
            *([checks.run("ofed.tools", "the fabric tools are installed (ib_write_bw, ibv_devinfo)",
                          "command -v ib_write_bw && command -v ibv_devinfo")] if self.opts["tools"] else []),
            *([checks.run("ofed.diags", "the IB diagnostics are installed (ibstat)", "command -v ibstat")]
              if self.opts["diags"] else []),
            checks.run("ofed.devices", "ibv_devinfo sees an RDMA device", "ibv_devinfo -l",
                       expect=r"(?m)^[1-9]\d* HCAs? found:", needs="fabric"),
        ]
