#!/usr/bin/env bats
# imagekit's own checks beside Pyxis's tests (issue 34), run the same way in every mode by
# tests/export/test_pyxis_suite.py, with Pyxis's helpers. The images are imagekit-extra/* in
# tests/export/pyxis_standins.py.

load ./common

@test "imagekit: Debian /etc/profile and the image's ENV PATH" {
    # Debian's /etc/profile resets PATH in the login shell: the declared /opt/app/bin must come back.
    run_srun --container-image=imagekit-extra/debianpath:1 sh -c 'apptool'
    [ "${lines[-1]}" == "apptool-ok" ]
}

@test "imagekit: the image's profile.d script extends PATH" {
    # The image's own /etc/profile.d/50-sitetool.sh puts its tool first on PATH: it must stay there.
    run_srun --container-image=imagekit-extra/profiled:1 sh -c 'echo "$PATH"; sitetool'
    [ "${lines[-2]}" == "/opt/sitetool/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" ]
    [ "${lines[-1]}" == "sitetool-ok" ]
}

@test "imagekit: the image's PS4 runs nothing in root's traced login shell" {
    # ENV PS4='$(touch /tmp/imagekit-ps4-ran)+ ' SHELLOPTS=xtrace: bash ignores PS4 from the
    # environment for root, so its substitution never runs (security-3 G5). The container's /tmp
    # is its own: the marker is there only if the login shell before the command ran it.
    run_srun --container-image=imagekit-extra/ps4:1 sh -c 'test ! -e /tmp/imagekit-ps4-ran && echo no-marker'
    [ "${lines[-1]}" == "no-marker" ]
}
