#!/usr/bin/env bash
# Make the servers the tests need answer on 127.0.0.1 (Debian 12, run as root).
#
#   scripts/services.sh            install what is missing, start what does not answer
#   scripts/services.sh stop       stop what this script manages: Redis 6380-6382,
#                                  the replica on 6390, the Redis Cluster on
#                                  7000-7002 and ZooKeeper
#   scripts/services.sh stop all   the same, plus Redis 6379, MariaDB and PostgreSQL
#
# Servers:  Redis 6379 and its replica 6390 | Redlock Redis 6380 6381 6382 | Redis Cluster 7000-7002
#           MariaDB 3306 (root, no password, db test) | PostgreSQL 5432 (trust, db test)
#           ZooKeeper 2181 (standalone)
#
# There is no systemd here, and package installs never start services, so every
# daemon is started by hand and detached from this shell (redis --daemonize,
# start-stop-daemon --background, pg_ctlcluster, setsid) so that it outlives it.
# Servers that already answer are left alone. Runs are serialised with flock, and
# fd 9 (the lock) is closed for every daemon so that it does not keep the lock.
set -euo pipefail

TIMEOUT=${SERVICES_TIMEOUT:-60}          # seconds to wait for each server to answer
REDIS_DIR=/tmp                           # pid/log files of the standalone Redis servers
CLUSTER_DIR=/tmp/redis-cluster           # pid/log/nodes-PORT.conf of the cluster nodes
ZK_DIR=/tmp/zk                           # ZooKeeper config, data, log and pid file
MARIADB_LOG=/var/log/mysql/error.log
APT_LOG=/tmp/services-apt.log
LOCK_FILE=/tmp/services.sh.lock
REDIS_PORTS=(6379 6380 6381 6382)
REPLICA_PORT=6390                        # a replica of 6379, for tests of WAIT
CLUSTER_PORTS=(7000 7001 7002)
PACKAGES=(redis-server redis-tools mariadb-server postgresql zookeeper zookeeperd default-jre-headless)

# ---------------------------------------------------------------- helpers

now() { local t=$EPOCHREALTIME; echo "${t/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
say() { printf '%-14s %-20s %s\n' "$1" "$2" "$3"; }         # service, address, state
fail() { echo "services.sh: $*" >&2; exit 1; }
need_root() { [[ $EUID -eq 0 ]] || fail "must run as root to $1"; }
port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
port_closed() { ! port_open "$1"; }

# wait_until WHAT LOGFILE CMD...: poll CMD until it succeeds; after $TIMEOUT s
# fail loudly, showing the tail of LOGFILE.
wait_until() {
	local what=$1 logfile=$2
	shift 2
	local deadline=$((SECONDS + TIMEOUT))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			echo "services.sh: $what: no answer within ${TIMEOUT}s" >&2
			if [[ -n $logfile && -r $logfile ]]; then
				echo "--- tail of $logfile:" >&2
				tail -n 15 "$logfile" >&2
			fi
			exit 1
		fi
		sleep 0.1
	done
}

# ---------------------------------------------------------------- packages

# have PACKAGE: installed according to dpkg, or its command is already there.
have() {
	[[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]] && return 0
	case $1 in
	redis-server) command -v redis-server ;;
	redis-tools) command -v redis-cli ;;
	mariadb-server) command -v mariadbd || [[ -x /usr/sbin/mariadbd ]] ;;
	postgresql) command -v pg_ctlcluster && compgen -G '/usr/lib/postgresql/*/bin/postgres' ;;
	zookeeper) [[ -r /usr/share/java/zookeeper.jar ]] ;;
	default-jre-headless) command -v java ;;
	*) false ;;
	esac >/dev/null
}

install_missing() {
	local pkg missing=()
	for pkg in "${PACKAGES[@]}"; do
		have "$pkg" || missing+=("$pkg")
	done
	((${#missing[@]})) || return 0
	need_root "install ${missing[*]}"
	echo "installing: ${missing[*]} (log: $APT_LOG)"
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get update && apt-get install -y "${missing[@]}"; } >"$APT_LOG" 2>&1; then
		tail -n 30 "$APT_LOG" >&2
		fail "apt-get install ${missing[*]} failed"
	fi
}

# ---------------------------------------------------------------- Redis

rcli() {
	local port=$1
	shift
	timeout 3 redis-cli -h 127.0.0.1 -p "$port" "$@"
}
redis_up() { [[ $(rcli "$1" ping 2>/dev/null) == PONG ]]; }

# start_redis PORT DIR [ARGS...]: one detached redis-server (--daemonize yes setsids).
start_redis() {
	local port=$1 dir=$2
	shift 2
	mkdir -p "$dir"
	redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
		--daemonize yes --pidfile "$dir/redis-$port.pid" --logfile "$dir/redis-$port.log" \
		--dir "$dir" "$@" 9>&-
}

stop_redis() {
	local port=$1
	redis_up "$port" || return 0
	rcli "$port" shutdown nosave >/dev/null 2>&1 || true
	wait_until "redis $port to stop" "" port_closed "$port"
}

svc_redis() {
	local port=$1 t0
	t0=$(now)
	if redis_up "$port"; then
		say redis "127.0.0.1:$port" "already running"
		return
	fi
	start_redis "$port" "$REDIS_DIR"
	wait_until "redis 127.0.0.1:$port" "$REDIS_DIR/redis-$port.log" redis_up "$port"
	say redis "127.0.0.1:$port" "started ($(since "$t0"))"
}

# replica_up: 6390 answers and replicates 6379 with its link up.
replica_up() {
	local info
	info=$(rcli "$REPLICA_PORT" info replication 2>/dev/null) || return 1
	[[ $info == *master_host:127.0.0.1* && $info == *master_port:6379* &&
		$info == *master_link_status:up* ]]
}

svc_replica() {
	local t0
	t0=$(now)
	if replica_up; then
		say redis-replica "127.0.0.1:$REPLICA_PORT" "already running"
		return
	fi
	if ! redis_up "$REPLICA_PORT"; then
		start_redis "$REPLICA_PORT" "$REDIS_DIR" --replicaof 127.0.0.1 6379
	fi
	wait_until "redis replica 127.0.0.1:$REPLICA_PORT (master_link_status:up)" \
		"$REDIS_DIR/redis-$REPLICA_PORT.log" replica_up
	say redis-replica "127.0.0.1:$REPLICA_PORT" "started ($(since "$t0"))"
}

# ---------------------------------------------------------------- Redis Cluster

# cluster_ok: every node answers, state ok, all slots served by exactly these three.
cluster_ok() {
	local port info
	for port in "${CLUSTER_PORTS[@]}"; do
		info=$(rcli "$port" cluster info 2>/dev/null) || return 1
		[[ $info == *cluster_state:ok* && $info == *cluster_slots_ok:16384* &&
			$info == *cluster_known_nodes:3[^0-9]* ]] || return 1
	done
}

svc_cluster() {
	local port t0 nodes=() addr="127.0.0.1:${CLUSTER_PORTS[0]}-${CLUSTER_PORTS[-1]}"
	t0=$(now)
	if cluster_ok; then
		say redis-cluster "$addr" "already running"
		return
	fi
	# Not a working cluster: start from scratch, forgetting any old cluster state.
	for port in "${CLUSTER_PORTS[@]}"; do
		stop_redis "$port"
		rm -f "$CLUSTER_DIR/nodes-$port.conf"
		start_redis "$port" "$CLUSTER_DIR" --cluster-enabled yes \
			--cluster-config-file "nodes-$port.conf"
		nodes+=("127.0.0.1:$port")
	done
	for port in "${CLUSTER_PORTS[@]}"; do
		wait_until "redis cluster node 127.0.0.1:$port" "$CLUSTER_DIR/redis-$port.log" redis_up "$port"
	done
	if ! redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
		>"$CLUSTER_DIR/create.log" 2>&1; then
		tail -n 30 "$CLUSTER_DIR/create.log" >&2
		fail "redis-cli --cluster create failed"
	fi
	wait_until "redis cluster $addr (cluster_state:ok)" "$CLUSTER_DIR/create.log" cluster_ok
	say redis-cluster "$addr" "started ($(since "$t0"))"
}

stop_cluster() {
	local port
	for port in "${CLUSTER_PORTS[@]}"; do
		stop_redis "$port"
		rm -f "$CLUSTER_DIR/nodes-$port.conf"
	done
}

# ---------------------------------------------------------------- MariaDB

mariadb_tcp_up() { mariadb --connect-timeout=5 -h 127.0.0.1 -P 3306 -u root test -e 'select 1'; }
mariadb_socket_up() { mariadb-admin --connect-timeout=5 --protocol=socket ping; }
mariadb_gone() { ! ps -C mariadbd -o stat= | grep -q '^[^Z]'; } # zombies do not count

start_mariadb() {
	local datadir
	datadir=$(my_print_defaults --mysqld | sed -n 's/^--datadir=//p' | tail -n 1)
	datadir=${datadir:-/var/lib/mysql}
	mkdir -p /run/mysqld "$(dirname "$MARIADB_LOG")"
	chown mysql:mysql /run/mysqld "$(dirname "$MARIADB_LOG")"
	if [[ ! -d $datadir/mysql ]]; then
		mariadb-install-db --user=mysql --datadir="$datadir" >/tmp/mariadb-install-db.log 2>&1 ||
			{ tail -n 30 /tmp/mariadb-install-db.log >&2; fail "mariadb-install-db failed"; }
	fi
	start-stop-daemon --start --background --make-pidfile --pidfile /run/mysqld/start.pid \
		--chuid mysql --exec /usr/sbin/mariadbd -- \
		--user=mysql --bind-address=127.0.0.1 --port=3306 --log-error="$MARIADB_LOG" 9>&-
}

# The tests run two packages at once, each with pools of its own (and the
# orders suites hold connections per cart): the default limits (151 on
# MariaDB, 100 on PostgreSQL) refuse connections under a full make test.
MARIADB_MAX_CONNECTIONS=1000
PG_MAX_CONNECTIONS=500

# mariadb_connections raises max_connections to MARIADB_MAX_CONNECTIONS (until
# the server restarts).
mariadb_connections() {
	mariadb -h 127.0.0.1 -P 3306 -u root -e "SET GLOBAL max_connections = GREATEST(@@max_connections, $MARIADB_MAX_CONNECTIONS)"
}

svc_mariadb() {
	local t0 state="already running"
	t0=$(now)
	if mariadb_tcp_up >/dev/null 2>&1; then
		mariadb_connections
		say mariadb 127.0.0.1:3306 "$state"
		return
	fi
	need_root "start MariaDB"
	if ! mariadb_socket_up >/dev/null 2>&1; then
		if mariadb_gone >/dev/null; then
			start_mariadb
			state="started"
		fi
		wait_until "MariaDB (unix socket)" "$MARIADB_LOG" mariadb_socket_up
	fi
	# Debian's root@localhost is unix_socket only: allow root over TCP, no password.
	mariadb --protocol=socket -e "
		ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');
		CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
		GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
		CREATE DATABASE IF NOT EXISTS test;
		FLUSH PRIVILEGES;"
	wait_until "MariaDB 127.0.0.1:3306 (root over TCP)" "$MARIADB_LOG" mariadb_tcp_up
	mariadb_connections
	if [[ $state == started ]]; then
		state="started ($(since "$t0"))"
	else
		state="already running (granted root over TCP)"
	fi
	say mariadb 127.0.0.1:3306 "$state"
}

stop_mariadb() {
	mariadb_socket_up >/dev/null 2>&1 || return 0
	mariadb-admin --protocol=socket shutdown
	wait_until "MariaDB to stop" "$MARIADB_LOG" mariadb_gone
}

# ---------------------------------------------------------------- PostgreSQL

export PGCONNECT_TIMEOUT=5
pg_sql() { psql -h 127.0.0.1 -p 5432 -U postgres -w -Atq "$@"; }
pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q && [[ $(pg_sql -d test -c 'select 1' 2>/dev/null) == 1 ]]; }

# pg_version: the newest major version with clusters in /etc/postgresql, else the newest installed.
pg_version() {
	local v
	v=$(ls /etc/postgresql 2>/dev/null | grep -E '^[0-9]+(\.[0-9]+)?$' | sort -V | tail -n 1) || true
	[[ -n $v ]] || v=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n 1) || true
	[[ -n $v ]] || fail "PostgreSQL is not installed"
	echo "$v"
}

# pg_trust_loopback HBA: put a trust line for TCP loopback first in pg_hba.conf.
pg_trust_loopback() {
	local hba=$1
	grep -Eq '^host\s+all\s+all\s+127\.0\.0\.1/32\s+trust\b' "$hba" && return 0
	sed -i '1i host    all    all    127.0.0.1/32    trust    # scripts/services.sh\
host    all    all    ::1/128         trust    # scripts/services.sh' "$hba"
}

# pg_connections raises max_connections to PG_MAX_CONNECTIONS, which takes a
# restart of the cluster (ALTER SYSTEM keeps it across restarts).
pg_connections() {
	local ver have
	have=$(pg_sql -d postgres -c 'show max_connections')
	((have >= PG_MAX_CONNECTIONS)) && return 0
	need_root "raise PostgreSQL's max_connections"
	ver=$(pg_version)
	pg_sql -d postgres -c "ALTER SYSTEM SET max_connections = $PG_MAX_CONNECTIONS"
	pg_ctlcluster "$ver" main restart 9>&-
	wait_until "PostgreSQL $ver 127.0.0.1:5432 (restarted, max_connections $PG_MAX_CONNECTIONS)" \
		"/var/log/postgresql/postgresql-$ver-main.log" pg_up
}

svc_postgres() {
	local t0 ver state="already running"
	t0=$(now)
	if pg_up; then
		pg_connections
		say postgresql 127.0.0.1:5432 "$state"
		return
	fi
	need_root "start PostgreSQL"
	ver=$(pg_version)
	if [[ ! -f /etc/postgresql/$ver/main/postgresql.conf ]]; then
		pg_createcluster --port 5432 "$ver" main >/tmp/pg_createcluster.log 2>&1 ||
			{ tail -n 30 /tmp/pg_createcluster.log >&2; fail "pg_createcluster $ver main failed"; }
	fi
	pg_trust_loopback "/etc/postgresql/$ver/main/pg_hba.conf"
	if pg_ctlcluster "$ver" main status >/dev/null 2>&1; then
		pg_ctlcluster "$ver" main reload
	else
		pg_ctlcluster "$ver" main start 9>&-
		state="started"
	fi
	local log=/var/log/postgresql/postgresql-$ver-main.log
	wait_until "PostgreSQL $ver 127.0.0.1:5432" "$log" pg_isready -h 127.0.0.1 -p 5432 -q
	[[ $(pg_sql -d postgres -c "select 1 from pg_database where datname = 'test'") == 1 ]] ||
		pg_sql -d postgres -c 'CREATE DATABASE test'
	wait_until "PostgreSQL $ver 127.0.0.1:5432 (select 1 in db test)" "$log" pg_up
	pg_connections
	if [[ $state == started ]]; then
		state="started ($ver/main, $(since "$t0"))"
	else
		state="already running ($ver/main, now trust on TCP)"
	fi
	say postgresql 127.0.0.1:5432 "$state"
}

stop_postgres() {
	local ver
	ver=$(pg_version)
	pg_ctlcluster "$ver" main status >/dev/null 2>&1 || return 0
	pg_ctlcluster "$ver" main stop
}

# ---------------------------------------------------------------- ZooKeeper

# zk4 CMD: a ZooKeeper four-letter command over bash's /dev/tcp (there is no nc).
zk4() { timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/2181 && printf %s "$1" >&3 && cat <&3' _ "$1" 2>/dev/null; }
# ruok answers before the server serves; srvr saying standalone means it serves.
zk_up() { [[ $(zk4 srvr) == *"Mode: standalone"* ]]; }

# zk_pid: the pid of the ZooKeeper this script started, if it still runs.
zk_pid() {
	local pid
	pid=$(cat "$ZK_DIR/zk.pid" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
	[[ $(tr '\0' ' ' <"/proc/$pid/cmdline") == *"$ZK_DIR/zoo.cfg"* ]] || return 1
	echo "$pid"
}
zk_gone() { ! zk_pid; }

write_zk_config() {
	mkdir -p "$ZK_DIR/data" "$ZK_DIR/log"
	cat >"$ZK_DIR/zoo.cfg" <<EOF
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$ZK_DIR/data
clientPort=2181
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf
EOF
}

svc_zookeeper() {
	local t0
	t0=$(now)
	if zk_up; then
		say zookeeper 127.0.0.1:2181 "already running"
		return
	fi
	stop_zookeeper # a leftover of ours that does not serve
	write_zk_config
	# Not in its own process group, so setsid execs java itself and $! is its pid.
	setsid nohup java -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar \
		-Dzookeeper.log.dir="$ZK_DIR/log" org.apache.zookeeper.server.quorum.QuorumPeerMain \
		"$ZK_DIR/zoo.cfg" >"$ZK_DIR/log/zk.out" 2>&1 </dev/null 9>&- &
	echo $! >"$ZK_DIR/zk.pid"
	wait_until "ZooKeeper 127.0.0.1:2181 (srvr: Mode: standalone)" "$ZK_DIR/log/zk.out" zk_up
	say zookeeper 127.0.0.1:2181 "started ($(since "$t0"))"
}

stop_zookeeper() {
	local pid
	pid=$(zk_pid) || return 0
	kill "$pid"
	wait_until "ZooKeeper (pid $pid) to stop" "$ZK_DIR/log/zk.out" zk_gone
	rm -f "$ZK_DIR/zk.pid"
}

# ---------------------------------------------------------------- main

# in_parallel 'CMD ARGS' ...: run each as a background job, then print their
# output in the given order; exits if any job failed.
in_parallel() {
	local tmp i rc=0 pids=()
	tmp=$(mktemp -d)
	for i in $(seq 0 $(($# - 1))); do
		# shellcheck disable=SC2086 # word splitting of "CMD ARGS" is intended
		(${@:i+1:1}) >"$tmp/$i.out" 2>"$tmp/$i.err" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[i]}" || rc=1
		cat "$tmp/$i.out"
		cat "$tmp/$i.err" >&2
	done
	rm -rf "$tmp"
	((rc == 0)) || fail "FAILED, see above ($(since "$T0"))"
}

start_all() {
	local port jobs=()
	install_missing
	for port in "${REDIS_PORTS[@]}"; do jobs+=("svc_redis $port"); done
	jobs+=(svc_cluster svc_mariadb svc_postgres svc_zookeeper)
	in_parallel "${jobs[@]}"
	in_parallel svc_replica # after 6379 answers
}

# stop_one NAME ADDR UPCMD STOPCMD...: run STOPCMD if UPCMD says it runs; report.
stop_one() {
	local name=$1 addr=$2 up=$3
	shift 3
	if $up >/dev/null 2>&1; then
		"$@"
		say "$name" "$addr" stopped
	else
		say "$name" "$addr" "not running"
	fi
}
cluster_any_up() { local p; for p in "${CLUSTER_PORTS[@]}"; do redis_up "$p" && return 0; done; return 1; }
pg_running() { pg_ctlcluster "$(pg_version)" main status; }

stop_all() {
	local port
	for port in "${REDIS_PORTS[@]:1}"; do
		stop_one redis "127.0.0.1:$port" "redis_up $port" stop_redis "$port"
	done
	stop_one redis-replica "127.0.0.1:$REPLICA_PORT" "redis_up $REPLICA_PORT" stop_redis "$REPLICA_PORT"
	stop_one redis-cluster "127.0.0.1:${CLUSTER_PORTS[0]}-${CLUSTER_PORTS[-1]}" cluster_any_up stop_cluster
	stop_one zookeeper 127.0.0.1:2181 zk_pid stop_zookeeper
	[[ ${1:-} == all ]] || return 0
	stop_one redis "127.0.0.1:${REDIS_PORTS[0]}" "redis_up ${REDIS_PORTS[0]}" stop_redis "${REDIS_PORTS[0]}"
	stop_one mariadb 127.0.0.1:3306 mariadb_socket_up stop_mariadb
	stop_one postgresql 127.0.0.1:5432 pg_running stop_postgres
}

main() {
	T0=$(now)
	exec 9>"$LOCK_FILE"
	flock -w 600 9 || fail "another services.sh run holds $LOCK_FILE"
	case ${1:-start} in
	start)
		# Called plainly, not as "if start_all" or "start_all ||": bash would
		# then ignore set -e inside it and in the jobs it starts.
		start_all
		echo "services: all answering ($(since "$T0"))"
		;;
	stop)
		stop_all "${2:-}"
		echo "services: stopped ($(since "$T0"))"
		;;
	*) fail "usage: $0 [start | stop [all]]" ;;
	esac
}

main "$@"
