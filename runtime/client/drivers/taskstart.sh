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
# CGROUP is one directory, or several joined by ":" (the resource limits' v1 hierarchies,
# runtime/client/drivers/limits.py), each joined here.
_yurt_ifs=$IFS
IFS=:
for _yurt_cg in $2; do
    if ! echo 0 >"$_yurt_cg/cgroup.procs"; then
        echo "yurt: cannot join cgroup $_yurt_cg" >&2
        exit 125
    fi
done
IFS=$_yurt_ifs
shift 2
exec "$@" 5>&-
