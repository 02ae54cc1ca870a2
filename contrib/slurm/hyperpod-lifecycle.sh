#!/usr/bin/env bash
# hyperpod-lifecycle.sh - SageMaker HyperPod lifecycle step (call it from
# on_create.sh on every node, as root): installs ringcache's Slurm Prolog
# and Epilog and the base config, and points slurm.conf at them.
#
#   hyperpod-lifecycle.sh BASE_CONF [SLURM_CONF]
#
# BASE_CONF: the site's ringcache config in which the datasets jobs may use
# say allow_uids = @jobs (see ringcache-slurm). ringcached, ringcache and
# this folder's scripts must already be installed (meson install and the
# ringcached package put them in PREFIX/libexec/ringcache/slurm, with the
# paths below rewritten for PREFIX).
# On the controller, run it too and `scontrol reconfigure` afterwards.
set -euo pipefail
base=${1:?usage: hyperpod-lifecycle.sh BASE_CONF [SLURM_CONF]}
slurm_conf=${2:-/opt/slurm/etc/slurm.conf}
here=$(dirname "$(readlink -f "$0")")
dest=/etc/slurm/ringcache

install -d -m 0755 "$dest" /etc/ringcache
install -m 0755 "$here/ringcache-slurm" "$here/prolog.sh" "$here/epilog.sh" "$dest/"
install -m 0600 "$base" /etc/ringcache/cluster.conf
# The base checked as the daemon will read it with no job granted.
RINGCACHE_BASE_CONF=/etc/ringcache/cluster.conf RINGCACHE_GRANTS=/nonexistent \
	"$dest/ringcache-slurm" render
/usr/sbin/ringcached --check-config /etc/ringcache/ringcache.conf

# One Prolog/Epilog each in slurm.conf: ours, unless the site has its own
# (then call ours from it).
set_key() {
	local key=$1 value=$2
	if grep -q "^$key=" "$slurm_conf"; then
		grep -q "^$key=$value\$" "$slurm_conf" ||
			echo "hyperpod-lifecycle: $slurm_conf has its own $key: call $value from it" >&2
	else
		echo "$key=$value" >>"$slurm_conf"
	fi
}
set_key Prolog "$dest/prolog.sh"
set_key Epilog "$dest/epilog.sh"
set_key PrologFlags Alloc
"$dest/ringcache-slurm" start
