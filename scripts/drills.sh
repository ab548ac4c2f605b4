#!/usr/bin/env bash
# Install what the failover drills (integration/drills, make drills) start on
# their own: redis-server, redis-sentinel and redis-cli for the Sentinel and
# Cluster deployments, ZooKeeper and a JRE for the ensemble (Debian 12, as
# root). The drills start every server themselves, on free loopback ports
# with data under their temp dirs, and kill them when they end: this script
# starts nothing and never touches the shared servers of scripts/services.sh.
#
#   scripts/drills.sh        install what is missing
set -euo pipefail

APT_LOG=/tmp/drills-apt.log
LOCK_FILE=/tmp/services.sh.lock # one apt-get at a time with services.sh
PACKAGES=(redis-server redis-tools redis-sentinel zookeeper default-jre-headless)

fail() { echo "drills.sh: $*" >&2; exit 1; }

# have PACKAGE: installed according to dpkg, or what the drills need of it is there.
have() {
	[[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]] && return 0
	case $1 in
	redis-server) command -v redis-server ;;
	redis-tools) command -v redis-cli ;;
	redis-sentinel) command -v redis-sentinel ;;
	zookeeper) [[ -r /usr/share/java/zookeeper.jar ]] ;;
	default-jre-headless) command -v java ;;
	*) false ;;
	esac >/dev/null
}

main() {
	local pkg missing=()
	for pkg in "${PACKAGES[@]}"; do
		have "$pkg" || missing+=("$pkg")
	done
	if ((${#missing[@]} == 0)); then
		echo "drills: ${PACKAGES[*]} installed"
		return
	fi
	[[ $EUID -eq 0 ]] || fail "must run as root to install ${missing[*]}"
	exec 9>"$LOCK_FILE"
	flock -w 600 9 || fail "another install holds $LOCK_FILE"
	echo "installing: ${missing[*]} (log: $APT_LOG)"
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get update && apt-get install -y "${missing[@]}"; } >"$APT_LOG" 2>&1; then
		tail -n 30 "$APT_LOG" >&2
		fail "apt-get install ${missing[*]} failed"
	fi
}

main "$@"
