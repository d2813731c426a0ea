# scripts/lib/proc.sh: what scripts/kafka.sh and scripts/hive-metastore.sh
# share to run a JVM daemon in a state directory. Sourced; the script sets
# STATE (its state directory), STOP_TIMEOUT (seconds) and DAEMON (the
# daemon's name in messages), and defines log and die.

# lock_state holds the state directory's lock (fd 9) until the script exits.
lock_state() {
    mkdir -p "$STATE"
    exec 9>"$STATE/.lock"
    flock 9
}

# free_port prints a TCP port on 127.0.0.1 that nothing uses now and that is
# not among its arguments. Taken below the kernel's ephemeral range (32768+)
# so an outgoing connection can't grab it before the daemon binds it; a lost
# race still shows up as a bind error and is retried.
free_port() {
    local used port i
    used=" $(ss -Htan 2>/dev/null | awk '{n=split($4,a,":"); printf "%s ", a[n]}') "
    for ((i = 0; i < 200; i++)); do
        port=$((20000 + RANDOM % 12000))
        [[ $used == *" $port "* || " $* " == *" $port "* ]] && continue
        # Also refuse a port something answers on (covers a missing `ss`).
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
        echo "$port"
        return 0
    done
    die "no free TCP port found"
}

# stop_pid stops the process pid with SIGTERM (and SIGCONT, for a frozen
# one), and SIGKILL after STOP_TIMEOUT seconds.
stop_pid() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    kill -CONT "$pid" 2>/dev/null || true # a frozen JVM can't handle SIGTERM
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "$DAEMON (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s, killing it"
    kill_pid "$pid"
}

# kill_pid kills the process pid and waits until it is gone.
kill_pid() {
    local pid=$1 i
    kill -KILL "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "could not kill the $DAEMON (pid $pid)"
}

# close_fds closes every file descriptor above 2 of the current (sub)shell:
# a daemon started after it (setsid nohup ... &) outlives the script and
# never holds a caller's pipe, or a lock, open.
close_fds() {
    local fd
    for fd in "/proc/$BASHPID/fd/"*; do
        fd=${fd##*/}
        ((fd > 2)) && eval "exec $fd>&-"
    done
    return 0
}
