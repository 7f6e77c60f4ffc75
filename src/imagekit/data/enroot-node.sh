# One Enroot container per node, as Pyxis does: the node's first rank creates and starts it (the
# "keeper", a shell that waits), and every rank of the node runs its command inside it with
# `enroot exec`. Ranks so share one user and mount namespace, and Open MPI's shared-memory single
# copy (CMA, process_vm_readv) works between them; one container per rank would put each rank in
# a user namespace of its own, where CMA is refused and Open MPI falls back or aborts.
# Set before this part: image, job, forward (--env NAME for the job's variables, --env NAME=VALUE for the
# image's own, which so reach the container and never this host script), binds (--mount ...), "$@" the command.
local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-0}}

# How many ranks this node runs: Open MPI says so; Slurm gives counts per node ("2(x3),1").
local_size() {
  if [ -n "${OMPI_COMM_WORLD_LOCAL_SIZE:-}" ]; then echo "$OMPI_COMM_WORLD_LOCAL_SIZE"; return; fi
  local spec=${SLURM_STEP_TASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:-1}} node=${SLURM_NODEID:-0} first=0 item n reps
  local -a items
  IFS=, read -ra items <<< "$spec"
  for item in "${items[@]}"; do
    n=${item%%(*}
    reps=1
    if [[ $item == *"(x"* ]]; then reps=${item#*(x}; reps=${reps%)}; fi
    if (( node < first + reps )); then echo "$n"; return; fi
    first=$((first + reps))
  done
  echo 1
}
nlocal=$(local_size)
# This user's Enroot state lives under /tmp (the container binds /tmp: the keeper writes its pid
# there), inside /tmp/imagekit-enroot-UID: made 0700 and used only once it is checked to be a real
# directory (not a link) that this user owns. Nobody else can then create, swap or plant a name in
# it, so nothing the sweep or the cleanup below removes can be another user's. A name someone else
# took is skipped for one nobody can guess, -TOKEN (the user's token in ~/.config/imagekit/private-name,
# as imagekit.util.private_names keeps it), then .2 … .8; every rank of the node arrives at the same one.
private_token() {
  local file=${HOME:-}/.config/imagekit/private-name token
  [[ ${HOME:-} == /* ]] || return 1
  if [ ! -e "$file" ] && [ ! -L "$file" ]; then
    (umask 077 && mkdir -p "${file%/*}") 2>/dev/null || return 1
    (umask 077 && od -An -N8 -tx1 /dev/urandom | tr -d ' \n' > "$file.$$" && echo >> "$file.$$" &&
      ln "$file.$$" "$file" 2>/dev/null)
    rm -f -- "$file.$$"
  fi
  # Only the user's own regular file, closed to others (find prints nothing otherwise).
  [ -n "$(find "$file" -maxdepth 0 -type f -user "$(id -u)" ! -perm /077 2>/dev/null)" ] || return 1
  token=$(head -c 16 "$file" 2>/dev/null)
  [[ $token =~ ^[0-9a-f]{16}$ ]] && echo "$token"
}
private_dir() {
  local base candidate n token
  base=/tmp/imagekit-enroot-$(id -u)
  for n in '' -TOKEN .2 .3 .4 .5 .6 .7 .8; do
    if [ "$n" = -TOKEN ]; then token=$(private_token) || continue; n=-$token; fi
    candidate=$base$n
    mkdir -m 700 "$candidate" 2>/dev/null || true
    if [ -d "$candidate" ] && [ ! -L "$candidate" ] && [ -O "$candidate" ]; then
      chmod 700 "$candidate" && echo "$candidate" && return 0
    fi
  done
  echo "imagekit: no private directory for $(id -un)'s Enroot state: $base and $base.2 to $base.8 are" \
    "not directories of $(id -un)'s (ls -ld $base*), and there is no home (\$HOME) to keep a name nobody" \
    "can guess in: an admin removes those names, or the job sets HOME" >&2
  return 1
}
statedir=$(private_dir) || exit 1
# Same for every rank of this job step on this node.
step=${PMIX_NAMESPACE:-${SLURM_JOB_ID:-none}.${SLURM_STEP_ID:-0}}
state="$statedir/${job//[^A-Za-z0-9._-]/_}-${step//[^A-Za-z0-9._-]/_}"
wait_s=${IMAGEKIT_ENROOT_WAIT:-600}

# A process's start time (/proc/PID/stat field 22), so that a recycled pid is not taken for its owner.
start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086 # the fields after the command name, split on purpose
  set -- $stat
  echo "${20}"
}

# What this user's earlier wrappers made and could not remove (their rank 0 was killed): node
# containers named, and state directories marked, with the wrapper's pid and start time, so that a
# live job's are never taken for dead ones.
owner_alive() { [ "$(start_time "$1" || true)" = "$2" ]; }
sweep() {
  local name dir owner
  while read -r name; do
    [[ $name =~ ^imagekit-.+-rank-([0-9]+)-([0-9]+)$ ]] || continue
    owner_alive "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" || enroot remove -f "$name" >/dev/null 2>&1 || true
  done < <(enroot list 2>/dev/null)
  # Only this user's own real directories (statedir is private; checked again all the same), by a
  # path without a trailing slash, and only when the owner file is "PID START" of a dead process.
  for dir in "$statedir"/*; do
    if [ ! -d "$dir" ] || [ -L "$dir" ] || [ ! -O "$dir" ]; then continue; fi
    owner=$(cat "$dir/owner" 2>/dev/null) || continue
    [[ $owner =~ ^([0-9]+)\ ([0-9]+)$ ]] || continue
    owner_alive "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" || rm -rf -- "$dir"
  done
}

keeper='' created='' name='' signalled=''
# shellcheck disable=SC2317 # invoked by the EXIT trap
finish() {
  local rc=$?
  touch "$state/done.$local_rank" 2>/dev/null || true
  if [ "$local_rank" = 0 ]; then
    # The node's container outlives every rank of the node, then goes. After a failure the others
    # may be gone without a word (10 s); on a signal the job is being torn down: no waiting, since
    # Slurm follows its SIGTERM with SIGKILL after KillWait.
    local until=$((SECONDS + (rc == 0 ? wait_s : 10)))
    while [ -z "$signalled" ] && [ "$(find "$state" -maxdepth 1 -name 'done.*' 2>/dev/null | wc -l)" -lt "$nlocal" ] \
          && (( SECONDS < until )); do sleep 0.2; done
    if [ -s "$state/pid" ]; then kill "$(cat "$state/pid")" 2>/dev/null || true; fi
    if [ -n "$keeper" ]; then wait "$keeper" 2>/dev/null || true; fi
    if [ -n "$created" ]; then enroot remove -f "$name" >/dev/null 2>&1 || true; fi
    rm -rf -- "$state"
  fi
  exit "$rc"
}

if [ "$local_rank" = 0 ]; then
  sweep
  mkdir -m 700 "$state"
  echo "$$ $(start_time $$)" > "$state/owner"
  trap finish EXIT
  trap 'signalled=1; exit 143' TERM INT
  target=$image
  if [[ $image == */* || $image == *.sqsh ]] && [ ! -r "$image" ]; then
    echo "imagekit: cannot read the image $image as $(id -un) on $(hostname)" > "$state/failed"
    cat "$state/failed" >&2
    exit 1
  fi
  if [ -f "$image" ]; then
    # A squashfs file: unpacked once per node and job, as Pyxis does (squashfuse needs a usable /dev/fuse).
    name="imagekit-${job//[^A-Za-z0-9_.-]/_}-rank-$$-$(start_time $$)"
    if ! enroot create --name "$name" "$image" > "$state/create.log" 2>&1; then
      { echo "imagekit: enroot create of $image failed:"; tail -n 5 "$state/create.log"; } > "$state/failed"
      cat "$state/failed" >&2
      exit 1
    fi
    created=1 target=$name
  fi
  # The keeper skips the image's entrypoint (an rc of its own), as Pyxis does by default.
  # shellcheck disable=SC2016 # expanded by the container's shell
  printf '%s\n' 'exec "$@"' > "$state/rc"
  # shellcheck disable=SC2016 # expanded by the container's sh
  enroot start --rc "$state/rc" "${forward[@]}" "${binds[@]}" "$target" sh -c \
    'echo "$$" > "$1/pid.tmp" && mv "$1/pid.tmp" "$1/pid"; while kill -0 "$2" 2>/dev/null; do sleep 1; done' \
    keeper "$state" "$$" > "$state/keeper.log" 2>&1 &
  keeper=$!
else
  trap 'touch "$state/done.$local_rank" 2>/dev/null || true' EXIT
fi

# Every rank: wait for the node's container, then run in it.
deadline=$((SECONDS + wait_s))
until [ -s "$state/pid" ]; do
  if [ -s "$state/failed" ]; then cat "$state/failed" >&2; exit 1; fi
  if [ -n "$keeper" ] && ! kill -0 "$keeper" 2>/dev/null; then
    # Told to the node's other ranks too, so that they stop now rather than at their timeout.
    { echo "imagekit: the node's enroot container did not start:"; tail -n 5 "$state/keeper.log"; } \
      > "$state/failed"
    cat "$state/failed" >&2
    exit 1
  fi
  if (( SECONDS > deadline )); then
    echo "imagekit: no enroot container for this node after ${wait_s} s (local rank 0 starts it)" >&2
    exit 1
  fi
  sleep 0.1
done
rc=0
enroot exec "${forward[@]}" "$(cat "$state/pid")" "$@" || rc=$?
exit "$rc"
