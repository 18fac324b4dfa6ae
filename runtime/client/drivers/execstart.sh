#!/bin/sh
# The first moments of a yurt exec task inside its namespaces: run by
# runtime/client/drivers/execdriver.py as pid 1 of a new PID namespace, in new mount, IPC and
# UTS namespaces (`unshare --mount --pid --ipc --uts`, then a fork: mounts private to the task),
# after taskstart.sh has joined the task's cgroups. It builds the task's root and execs the
# command chrooted into it, so the command stays pid 1 (Nomad's executor_linux_cgo.go
# `newLibcontainerConfig`: the task is its container's init).
#
# Usage: sh execstart.sh ROOTFS ROOT ALLOC LOCAL SECRETS HOSTNAME WORKDIR DEVCG N \
#            [HOST_PATH TASK_PATH ro|rw]*N -- COMMAND [ARG...]
#
# The root is a tmpfs at ROOT (an empty dir in the start's state dir) holding: the host's
# chroot_env (ROOTFS, built once per host by chroot.py), each of its top-level directories
# bind-mounted read-only and its symlinks copied; the alloc dir's ALLOC, LOCAL and SECRETS at
# /alloc, /local, /secrets (read-write, as Nomad's task_dir_hook); a private /tmp (nodev, as
# /dev/shm: no device opens there whatever the task makes), /proc of the
# task's PID namespace, a small /dev (null, zero, full, random, urandom, tty, shm); and the
# N binds: the host volume mounts, then the device nodes of the device hook (each
# read-only when "ro"; their destinations checked by execdriver.py `check_destination`, and
# for symlinks again here right before each mount; a file already there is never emptied).
# Devices: DEVCG is the task's own v1 devices cgroup ("" where there is none: then the task
# lacks mknod unless its cap_add names it, execdriver.py `_capabilities`). As Nomad's
# executor (executor_linux_cgo.go `configureIsolation`: runc's specconv `AllowedDevices`, plus
# `cmdDevices`), the task may create any node but open only null, zero, full, random,
# urandom, tty, console, ptmx, pts/* and net/tun, and its device nodes with their
# permissions (a device's mode is "dev-PERMS", e.g. "dev-rwm"; without "w" it is also bound
# read-only, and its writes denied: a read-only mount does not stop writes to a device).
# The tmpfs itself is then made read-only. COMMAND starts with setpriv, which leaves the
# task its capability set (and switches its user).
# Any failure ends the task with status 126 and the reason on its stderr.
set -e
rootfs=$1 root=$2 alloc=$3 local=$4 secrets=$5 name=$6 wd=$7 devcg=$8 n=$9
shift 9
step="build the task root"
if [ -n "$devcg" ]; then
    step="limit the task's devices in $devcg"
    echo a >"$devcg/devices.deny"
    for rule in 'c *:* m' 'b *:* m' 'c 1:3 rwm' 'c 1:5 rwm' 'c 1:7 rwm' 'c 1:8 rwm' \
            'c 1:9 rwm' 'c 5:0 rwm' 'c 5:1 rwm' 'c 5:2 rwm' 'c 136:* rwm' 'c 10:200 rwm'; do
        echo "$rule" >"$devcg/devices.allow"
    done
    step="build the task root"
fi
trap 'echo "yurt: exec: cannot $step" >&2; exit 126' EXIT
hostname "$name"
mkdir -p "$root"
mount -t tmpfs -o mode=0755 yurt-root "$root"
# Every process here costs a task start a few milliseconds (`scripts/bench_peers.py --rows
# exec`): the rootfs' symlinks are copied by one cp, the device nodes and stdio links below too.
find "$rootfs" -mindepth 1 -maxdepth 1 -type l -exec cp -P -t "$root" {} +
for entry in "$rootfs"/*; do
    if [ -d "$entry" ] && [ ! -L "$entry" ]; then
        mkdir "$root/${entry##*/}"
        mount --bind -o ro "$entry" "$root/${entry##*/}"
    fi
done
mkdir "$root/alloc" "$root/local" "$root/secrets" "$root/tmp" "$root/proc" "$root/dev"
mount --bind "$alloc" "$root/alloc"
mount --bind "$local" "$root/local"
mount --bind "$secrets" "$root/secrets"
mount -t tmpfs -o mode=1777,nodev yurt-tmp "$root/tmp"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o mode=0755,nosuid yurt-dev "$root/dev"
# New nodes of the host's devices (the tmpfs is not nodev; the devices cgroup decides what
# opens, and where there is none the task has no mknod: execdriver.py `_capabilities`), and
# the host's /dev/fd and stdio links, all /proc/self/fd..., where it has them.
if [ -L /dev/fd ] && [ -L /dev/stdin ] && [ -L /dev/stdout ] && [ -L /dev/stderr ]; then
    cp -a /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty /dev/fd \
        /dev/stdin /dev/stdout /dev/stderr "$root/dev/"
else
    cp -a /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty "$root/dev/"
    ln -s /proc/self/fd "$root/dev/fd"
    ln -s /proc/self/fd/0 "$root/dev/stdin"
    ln -s /proc/self/fd/1 "$root/dev/stdout"
    ln -s /proc/self/fd/2 "$root/dev/stderr"
fi
mkdir "$root/dev/shm"
mount -t tmpfs -o mode=1777,nosuid,nodev yurt-shm "$root/dev/shm"
# The task's own terminals (a new devpts instance, as a container's): `alloc exec -t` opens
# its pty here, so the command finds its terminal under /dev/pts.
mkdir "$root/dev/pts"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 yurt-pts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
# Fails the start if any part of the task path $1 is a symlink in the root: one there would
# be followed out of the task root, to the host (execdriver.py `check_destination` looked
# before the start; a sibling task sharing /alloc may have planted one since).
no_links() {
    rest=$1 here=$root
    while [ -n "$rest" ]; do
        part=${rest%%/*}
        case $rest in */*) rest=${rest#*/} ;; *) rest= ;; esac
        case $part in ''|.) continue ;; esac
        here=$here/$part
        if [ -L "$here" ]; then
            step="$step: ${here#"$root"} is a symbolic link"
            return 1
        fi
    done
}
while [ "$n" -gt 0 ]; do
    target=$root$2 step="mount $1 at $2"
    # A file destination is made only where absent: one there (under /alloc or /local) is
    # the alloc's, never emptied. The links are looked for again right before the mount.
    no_links "$2"
    if [ -d "$1" ]; then
        mkdir -p "$target"
    else
        mkdir -p "${target%/*}"
        [ -e "$target" ] || : >>"$target"
    fi
    no_links "$2"
    mode=$3
    case $mode in dev-*w*) mode=rw ;; dev-*) mode=ro ;; esac
    if [ "$mode" = ro ]; then mount --bind -o ro "$1" "$target"; else mount --bind "$1" "$target"; fi
    case $3 in dev-*) if [ -n "$devcg" ] && { [ -c "$1" ] || [ -b "$1" ]; }; then
        kind=c
        if [ -b "$1" ]; then kind=b; fi
        numbers=$(stat -L -c '%t %T' "$1")
        rule="$kind $((0x${numbers% *})):$((0x${numbers#* }))"
        echo "$rule ${3#dev-}" >"$devcg/devices.allow"
        if [ "$mode" = ro ]; then echo "$rule w" >"$devcg/devices.deny"; fi
    fi ;; esac
    shift 3
    n=$((n - 1))
done
shift  # --
step="make the task root read-only"
mount -o remount,ro yurt-root "$root"
trap - EXIT
exec unshare --root="$root" --wd="$wd" -- "$@"
