#!/bin/sh
# The first moments of a yurt raw_exec task, run by shim.sh as `setsid sh taskstart.sh STATE_DIR
# CGROUP COMMAND [ARG...]` in the task's own process (pid, session and process group), before
# its command: see shim.sh for why each step is here. Builtins only, and every step execs, so
# the task's pid stays this one. A file rather than an `sh -c` string: the shim, which waits
# for the task's whole life, then does not keep the text in its memory.
read -r _yurt_stat <"/proc/$$/stat"
_yurt_id() { shift 19; echo "$$ $1"; }
_yurt_id ${_yurt_stat##*) } >"$1/pid"
trap "" PIPE
_yurt_id ${_yurt_stat##*) } >&5 2>/dev/null
trap - PIPE
if [ -n "$2" ] && ! echo 0 >"$2/cgroup.procs"; then
    echo "yurt: cannot join cgroup $2" >&2
    exit 125
fi
shift 2
exec "$@" 5>&-
