#!/bin/sh
# yurt's per-task shim: runs one task in its own session, outlives the agent, and records the
# task's pid and, when it ends, its exit status.
#
# Usage: sh shim.sh STATE_DIR STDOUT STDERR WORK_DIR CGROUP COMMAND [ARG...]
#
# The agent starts the shim as a session and process-group leader (posix_spawn with setsid)
# with its stdout on a report pipe. The task reports "TASK_PID START_TIME" on that pipe (the
# agent reads it; "0 0" means the work dir could not be entered), and the shim its exit status
# when it ends. The shim holds STDOUT and
# STDERR (FIFOs, or /dev/null) open read-write for as long as it lives: the task can always
# write, never gets SIGPIPE, and output written while no agent reads waits in the pipe.
# CGROUP is the cgroup the task joins before its command runs, or "" for none.
# Exit status: the shell's `$?` of the task, 128+N when signal N killed it.
state=$1 out=$2 err=$3 dir=$4 cgroup=$5
shift 5
# Without a cgroup per task, the agent starts the shim through runtime/client/drivers/reaper.py (a
# child subreaper: the task's orphaned descendants re-parent to the shim) and names it in
# YURT_REAPER (YURT_REAPER_PY, its interpreter), so that the shim kills them when the task ends.
reaper_py=${YURT_REAPER_PY:-} reaper=${YURT_REAPER:-}
# The task's first moments (taskstart.sh) live beside this file; absolute, as the shim cds.
case $0 in */*) taskstart=${0%/*}/taskstart.sh ;; *) taskstart=taskstart.sh ;; esac
case $taskstart in /*) ;; *) taskstart=$PWD/$taskstart ;; esac
unset YURT_REAPER YURT_REAPER_PY
# The report pipe moves to fd 5, which the task's start writes to, and the shim once more at
# the end, with SIGPIPE ignored: a reader that went away cannot hurt either.
exec 5>&1 1>/dev/null 2>>"$state/shim.log" 3<>"$out" 4<>"$err"
# Before the task exists, so that a restarted agent that does not know this start can find
# this shim and stop it (runtime/client/drivers/orphans.py).
echo "$$" >"$state/shim"
if ! cd "$dir"; then
    echo "cannot enter work dir $dir" >&2
    printf '127\n' >"$state/exit"
    trap '' PIPE
    echo "0 0" >&5 2>/dev/null
    exit 127
fi
# The task runs in the FOREGROUND: a non-interactive shell starts background (`&`) commands
# with SIGINT and SIGQUIT ignored, and SIGINT is Nomad's default kill signal; a foreground
# child keeps the shim's (default) dispositions. Being the child of a group leader, it is not
# one itself, so setsid(1) makes it a session and process-group leader (pgid = its pid)
# without forking, and then `sh taskstart.sh` runs in the task's own process, before the
# command:
# - it writes its pid and start time (field 22 of its stat, read with builtins only) to
#   $state/pid, the task's identity for an agent that finds this start without a handle;
# - it reports the same on fd 5, ignoring SIGPIPE meanwhile: the agent that reads it may have
#   died, and the task must run anyway (the shim supervises it). That write's failure is not
#   reported either: its stderr is already the task's, and a report nobody reads (the agent
#   gave up on this start, a `yurt run` stopping) is no news for the task's log, where dash's
#   "echo: I/O error" would reach the operator as if the task had said it;
# - it joins the task's cgroup (runtime/client/drivers/cgroups.py), before the command can fork;
# - it execs the command (as `exec "$@"`, so a path containing "=" is a command, not a
#   variable assignment) with fd 5 closed. Every step execs: the task's pid stays this one.
# A stop that lands before the exec finds the same pid, its group, and SIGINT at default.
setsid /bin/sh "$taskstart" "$state" "$cgroup" "$@" >&3 2>&4 3>&- 4>&- </dev/null
status=$?
# With a cgroup, the agent learns the status at once from fd 5, before the durable write below
# (a program: milliseconds of restart latency); SIGPIPE ignored, as the agent may be gone.
# A subreaper shim does not: the agent, when told, would kill that write's programs as the
# task's leftovers. It waits for the shim's exit and reads the file instead.
if [ -z "$reaper" ]; then
    trap '' PIPE
    echo "$status" >&5 2>/dev/null
else
    "$reaper_py" -I -S "$reaper" kill "$$"
fi
exec 5>&-
# The durable status, in one program: dd writes it and fsyncs it (conv=fsync). No temporary
# file and rename are needed for atomicity, as nothing reads this file while the shim lives:
# the agent reads it only once the shim has exited (its pidfd, or the shim found gone), so
# it never sees a write half done. A power loss before the fsync leaves the status unknown,
# as it left the rename undone before. (It was printf, sync and mv: two programs.) What dd
# says on failure goes to shim.log, as everything the shim writes to its stderr.
dd of="$state/exit" conv=fsync status=none <<EOF
$status
EOF
# What the task wrote and no agent has read dies with the pipe when the last writer (this
# shim) exits. So if no log pump holds the stream's lock (the agent is down), move what waits
# in the pipe to a spill file that the next pump writes to the log first. At most 1 MiB, the
# pipe's size: a task that wrote more was blocked until an agent read it. See
# runtime/client/logs/spill.py for the names; dd reopens the FIFO so O_NONBLOCK stays off the task's.
spill() {
    [ -p "$1" ] || return 0
    shared=${1%/*}; shared=${shared%/*}; name=${1##*/}; name=${name%.fifo}
    { flock -n 9 && dd if="/dev/fd/$2" iflag=nonblock of="$shared/$name.spill" \
        oflag=append conv=notrunc bs=65536 count=16; } 9>>"$shared/$name.lock" 2>/dev/null
}
spill "$out" 3
spill "$err" 4
