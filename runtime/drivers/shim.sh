#!/bin/sh
# yurt's per-task shim: runs one task in its own process group, outlives the agent, and
# records the task's pid and, when it ends, its exit status.
#
# Usage: sh shim.sh STATE_DIR STDOUT STDERR WORK_DIR COMMAND [ARG...]
#
# The first invocation detaches a second one (re-parented to init, so the shim is never the
# agent's child and survives it) and exits. The detached shim reports "SHIM_PID TASK_PID" on
# the stdout it inherited (the agent reads it), then holds STDOUT and STDERR (FIFOs, or
# /dev/null) open read-write for as long as it lives: the task can always write, never gets
# SIGPIPE, and output written while no agent reads waits in the pipe.
# Exit status: the shell's `$?` of the task, 128+N when signal N killed it.
state=$1 out=$2 err=$3 dir=$4
shift 4
# Without a cgroup per task, YURT_REAPER (with YURT_REAPER_PY, its interpreter) makes the
# detached shim a child subreaper (runtime/drivers/reaper.py): the task's orphaned descendants
# re-parent to the shim, which kills them when the task ends.
if [ -z "${YURT_SHIM_CHILD:-}" ]; then
    YURT_SHIM_CHILD=1 ${YURT_REAPER:+"$YURT_REAPER_PY" -I -S "$YURT_REAPER" exec} \
        sh "$0" "$state" "$out" "$err" "$dir" "$@" </dev/null 2>/dev/null &
    exit 0
fi
reaper_py=${YURT_REAPER_PY:-} reaper=${YURT_REAPER:-}
unset YURT_SHIM_CHILD YURT_REAPER YURT_REAPER_PY
exec 2>>"$state/shim.log" 3<>"$out" 4<>"$err"
# Before the task exists, so that a restarted agent that does not know this start can find
# this shim and stop it (runtime/drivers/orphans.py).
echo "$$" >"$state/shim"
cd "$dir" || { echo "cannot enter work dir $dir" >&2; printf '127\n' >"$state/exit"; echo "$$ 0"; exit 127; }
# setsid(1) makes the task a session and process-group leader (pgid = its pid) and execs it:
# a background child is never a group leader, so setsid does not fork and $! is the task.
# A non-interactive shell starts background commands with SIGINT and SIGQUIT ignored, and
# SIGINT is Nomad's default kill signal: env(1) puts both back to their defaults. It then runs
# `sh -c 'exec "$0" "$@"'` rather than the command itself, because env would take a command
# path containing "=" for a variable assignment. Every step execs: $! stays the task's pid.
setsid env --default-signal=INT,QUIT /bin/sh -c 'exec "$0" "$@"' "$@" \
    >&3 2>&4 3>&- 4>&- </dev/null &
pid=$!
# The task's pid and start time (field 22 of its stat, read with builtins only): its identity
# for an agent that finds this start without a handle, after this shim is gone too.
start=
if read -r st <"/proc/$pid/stat"; then set -- ${st##*) }; shift 19; start=$1; fi
printf '%s %s\n' "$pid" "$start" >"$state/pid"
# The agent that reads this may have died meanwhile: a write to its closed pipe must not kill
# the shim (SIGPIPE) and leave the task without one.
trap '' PIPE
echo "$$ $pid"
trap - PIPE
exec 1>/dev/null
wait "$pid"
status=$?
[ -z "$reaper" ] || "$reaper_py" -I -S "$reaper" kill "$$"
printf '%s\n' "$status" >"$state/exit.tmp"
sync "$state/exit.tmp" 2>/dev/null
mv -f "$state/exit.tmp" "$state/exit"
# What the task wrote and no agent has read dies with the pipe when the last writer (this
# shim) exits. So if no log pump holds the stream's lock (the agent is down), move what waits
# in the pipe to a spill file that the next pump writes to the log first. At most 1 MiB, the
# pipe's size: a task that wrote more was blocked until an agent read it. See
# runtime/logs/spill.py for the names; dd reopens the FIFO so O_NONBLOCK stays off the task's.
spill() {
    [ -p "$1" ] || return 0
    shared=${1%/*}; shared=${shared%/*}; name=${1##*/}; name=${name%.fifo}
    { flock -n 9 && dd if="/dev/fd/$2" iflag=nonblock of="$shared/$name.spill" \
        oflag=append conv=notrunc bs=65536 count=16; } 9>>"$shared/$name.lock" 2>/dev/null
}
spill "$out" 3
spill "$err" 4
