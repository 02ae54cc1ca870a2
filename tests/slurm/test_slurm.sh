#!/usr/bin/env bash
# test_slurm.sh - contrib/slurm on a real single-node Slurm: the fixture
# starts munged, slurmctld and slurmd (Debian's slurm-wlm and munge) in a
# private folder with private ports, with contrib/slurm's prolog and epilog
# as `meson install` installs them (a staging install of the build);
# an unprivileged user (nobody) sbatches a job that reads a dataset through
# the ringcached the prolog started and writes a checkpoint. After the
# epilog: the checkpoint is in S3 with the job's bytes (read back with
# Debian's awscli) and nobody's access to both datasets is gone.
#
# Needs root (slurmd, setpriv), RINGCACHE_TEST_S3_* and _PREFIX (tests/run)
# and a build (RINGCACHE_BUILD_DIR). Skips, saying why, only where the Slurm
# or munge daemons are missing or slurmd cannot start. Writes TAP to
# $RINGCACHE_TAP_FILE.
#
# What the fixture needed: a munge key of its own and munged on a private
# socket (AuthInfo=socket=...), SlurmUser=root, ProctrackType=proctrack/
# linuxproc and TaskPlugin=task/none (no cgroups), PrologFlags=Alloc, the
# node's short hostname as NodeName, free ports, a job folder the job's user can
# write, and prolog/epilog wrappers that set the paths (slurmd gives them
# almost no environment).
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${RINGCACHE_BUILD_DIR:-$SRC/build}
# shellcheck source=tests/fixture/tap.sh
. "$SRC/tests/fixture/tap.sh"
skip() {
	echo "test_slurm: SKIP: $1"
	tap=("ok 1 - slurm # SKIP $1")
	finish
}

for b in munged slurmctld slurmd sbatch scontrol; do
	command -v "$b" >/dev/null || skip "$b not installed (apt-get install slurm-wlm munge)"
done
[ "$(id -u)" = 0 ] || skip "not root: slurmd and the prolog must run as root"
: "${RINGCACHE_TEST_S3_ENDPOINT:?}" "${RINGCACHE_TEST_PREFIX:?}"

D=$(mktemp -d "${RINGCACHE_TEST_TMP:-/tmp}/slurm.XXXXXX")
chmod 0755 "$D"
pids=()
cleanup() {
	local p
	# Jobs first (slurmstepd outlives slurmd): cancelled while the
	# controller still answers.
	[ -f "$D/slurm.conf" ] && SLURM_CONF=$D/slurm.conf timeout 10 \
		scancel --quiet --full -p test 2>/dev/null && sleep 1
	[ -f "$D/state/ringcached.pid" ] && pids+=("$(cat "$D/state/ringcached.pid")")
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null
	done
	[ -n "${KEEP:-}" ] || rm -rf "$D"
}
trap cleanup EXIT

host=$(hostname -s)
# Two free ports from the kernel (a fixed guess may be taken, and a slurmd
# that cannot bind would read as "cannot start").
read -r port port2 < <(/usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
mkdir -p "$D"/{munge,ctld,spool,state,job,log}
chmod 0700 "$D/munge"
chmod 0755 "$D/state"
chmod 0777 "$D/job" # the job's folder: nobody writes its output there

# ---- munge ------------------------------------------------------------
dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$D/munge/munge.key"
munged --force --key-file="$D/munge/munge.key" --socket="$D/munge/munge.sock" \
	--pid-file="$D/munge/munged.pid" --log-file="$D/log/munged.log" \
	--seed-file="$D/munge/seed" || skip "munged does not start: $(tail -3 "$D/log/munged.log")"
pids+=("$(cat "$D/munge/munged.pid")")
chmod 0755 "$D/munge" # the socket must be reachable by nobody's sbatch

# ---- ringcache: base config and prolog/epilog wrappers -----------------
# The scripts as `meson install` lays them out (PREFIX/libexec/ringcache/
# slurm, executable, side by side), from a staging install of this build.
opt() { # opt NAME: a meson option of the build
	meson introspect --buildoptions "$BUILD" | /usr/bin/python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]))' "$1"
}
SLURM_DIR=$D/stage$(opt prefix)/$(opt libexecdir)/ringcache/slurm
if meson install -C "$BUILD" --no-rebuild --destdir "$D/stage" \
		>"$D/log/install.log" 2>&1 && [ -x "$SLURM_DIR/prolog.sh" ]; then
	pass "the Slurm scripts installed (meson install) in $SLURM_DIR"
else
	failt "meson install puts the Slurm scripts in $SLURM_DIR ($(tail -n 3 "$D/log/install.log"))"
	finish
fi
e_bucket=$RINGCACHE_TEST_S3_BUCKET
cat >"$D/cluster.conf" <<CONF
[daemon]
socket = $D/state/rc.sock
socket_mode = 0666
memory = 256M
block_size = 1M
journal = $D/state/journal
journal_size = 128M
staging_memory = 64M

[s3]
endpoint = $RINGCACHE_TEST_S3_ENDPOINT
region = $RINGCACHE_TEST_S3_REGION
addressing = path
tls_verify = false
credentials = config
access_key = $RINGCACHE_TEST_S3_ACCESS_KEY
secret_key = $RINGCACHE_TEST_S3_SECRET_KEY
max_retries = 3

[dataset ds]
uri = s3://$e_bucket/${RINGCACHE_TEST_PREFIX}ds/
allow_uids = @jobs

[dataset ck]
uri = s3://$e_bucket/${RINGCACHE_TEST_PREFIX}slurm-ck/
allow_uids = @jobs
writable = true
write_uids = @jobs
durability = local
part_size = 5M
CONF
chmod 0600 "$D/cluster.conf"
cat >"$D/env" <<ENV
export RINGCACHE_BASE_CONF=$D/cluster.conf RINGCACHE_CONF=$D/state/ringcache.conf
export RINGCACHE_STATE=$D/state RINGCACHE_BIN=$BUILD RINGCACHE_CLI=$BUILD/ringcache
export RINGCACHE_LOG=$D/log/ringcached.log PATH=/usr/sbin:/usr/bin:/sbin:/bin
export SLURM_CONF=$D/slurm.conf
# An S3 server that stops answering fails the epilog here, not meson's
# timeout (which would SIGKILL this script before its cleanup).
export RINGCACHE_SYNC_TIMEOUT=60
ENV
for hook in prolog epilog; do
	cat >"$D/$hook" <<HOOK
#!/bin/bash
. $D/env
$SLURM_DIR/$hook.sh >>$D/log/$hook.log 2>&1
rc=\$?
echo "\$SLURM_JOB_ID \$rc" >>$D/log/$hook.done
exit \$rc
HOOK
	chmod 0755 "$D/$hook"
done

# ---- slurm --------------------------------------------------------------
cat >"$D/slurm.conf" <<CONF
ClusterName=rctest
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$port2
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$D/ctld
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
Prolog=$D/prolog
Epilog=$D/epilog
PrologFlags=Alloc
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
chmod 0644 "$D/slurm.conf"
export SLURM_CONF=$D/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" >"$D/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" >"$D/log/slurmd.out" 2>&1 &
pids+=($!)
up=
for _ in $(seq 300); do
	kill -0 "${pids[-1]}" 2>/dev/null || break
	if scontrol show node "$host" 2>/dev/null | grep -q 'State=IDLE'; then up=1; break; fi
	sleep 0.2
done
if [ -z "$up" ]; then
	echo "--- slurmd:"; tail -20 "$D/log/slurmd.log" "$D/log/slurmd.out" 2>/dev/null
	echo "--- slurmctld:"; tail -20 "$D/log/slurmctld.log" 2>/dev/null
	kill -0 "${pids[-1]}" 2>/dev/null || skip "slurmd cannot start here (log above)"
	failt "slurmd started but the node is not IDLE"
	finish
fi
pass "single-node Slurm up (slurmctld, slurmd, munged)"

# ---- the job: read a dataset, write a checkpoint, as nobody --------------
ck_key=job-$$-$(date +%s)/model.pt # new in every run
cat >"$D/job/job.sh" <<JOB
#!/bin/bash
export PYTHONPATH=$SRC/contrib/python:$SRC/tests/python RINGCACHE_LIB=${RINGCACHE_JOB_LIB:-$BUILD/libringcache.so}
exec /usr/bin/python3 - <<'PY'
import hashlib, os, sys
import ringcache, test_binding as tb
c = ringcache.Client("$D/state/rc.sock")
ok = True
for key in [tb.small_key(i) for i in range(0, 300, 37)] + ["large/1.bin"]:
    with c.open("ds", key) as f:
        data = f.pread()
    ok &= data == tb.ds_bytes(key)
# A checkpoint of ~12 MB (three 5 MiB parts): sha256 chains of the id.
blob = b"".join(hashlib.sha256(b"ckpt%d" % i).digest() for i in range(400000))
with c.writer("ck", "$ck_key") as w:
    w.write(blob)
with open("blob.sha256", "w") as f:
    f.write(hashlib.sha256(blob).hexdigest())
print("job ok" if ok else "job: WRONG BYTES", "uid", os.getuid())
sys.exit(0 if ok else 1)
PY
JOB
chmod 0755 "$D/job/job.sh"
# The node's lifecycle script starts the daemon before any job (the
# prolog then reuses it); until a job is granted, nobody is refused.
(. "$D/env" && "$SLURM_DIR/ringcache-slurm" start) >>"$D/log/start.log" 2>&1
check "the lifecycle step starts ringcached" "$BUILD/ringcache" -s "$D/state/rc.sock" status >/dev/null
refused() { # refused DATASET: nobody's new session is refused it (ACL)
	local out
	out=$(setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$BUILD/ringcache" -s "$D/state/rc.sock" ls "$1" 2>&1)
	echo "  nobody: ringcache ls $1: $out"
	grep -q "not allowed by the dataset's ACL for this user" <<<"$out"
}
check "before the job nobody is refused dataset ds" refused ds
# Nothing of the job exists in S3 yet.
"$BUILD/rc-s3" head "$e_bucket" "${RINGCACHE_TEST_PREFIX}slurm-ck/$ck_key" >/dev/null 2>&1
check "no checkpoint in S3 before the job" test $? = 1

job=$(cd "$D/job" && setpriv --reuid=65534 --regid=65534 --clear-groups \
	env SLURM_CONF="$SLURM_CONF" sbatch --parsable --time=3 -o "$D/job/out" -e "$D/job/out" -D "$D/job" ./job.sh)
check "nobody submits the job (sbatch: $job)" test -n "$job"
for _ in $(seq 600); do
	grep -q "^$job " "$D/log/epilog.done" 2>/dev/null && break
	sleep 0.2
done
echo "--- job output:"; cat "$D/job/out" 2>/dev/null
echo "--- prolog/epilog:"; cat "$D/log/prolog.log" "$D/log/epilog.log" 2>/dev/null
check "the prolog reused ringcached and granted the job" grep -q "^$job 0$" "$D/log/prolog.done"
check "(reused, not restarted)" grep -q "reusing the ringcached" "$D/log/prolog.log"
check "the job read the right bytes through the daemon as nobody" grep -q "job ok uid 65534" "$D/job/out"
check "the epilog synced and revoked" grep -q "^$job 0$" "$D/log/epilog.done"

# The checkpoint, read back by awscli, has the job's bytes.
aws_get() {
	AWS_ACCESS_KEY_ID=$RINGCACHE_TEST_S3_ACCESS_KEY \
	AWS_SECRET_ACCESS_KEY=$RINGCACHE_TEST_S3_SECRET_KEY \
	AWS_DEFAULT_REGION=$RINGCACHE_TEST_S3_REGION \
	AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_CONFIG_FILE="$D/aws.conf" \
	AWS_EC2_METADATA_DISABLED=true timeout 60 /usr/bin/aws --endpoint-url "$RINGCACHE_TEST_S3_ENDPOINT" \
		s3api get-object --bucket "$e_bucket" --key "$1" "$2" >/dev/null
}
printf '[default]\ns3 =\n    addressing_style = path\n' >"$D/aws.conf"
aws_get "${RINGCACHE_TEST_PREFIX}slurm-ck/$ck_key" "$D/ck.got"
check "after the epilog the checkpoint is in S3 (awscli get-object)" test -s "$D/ck.got"
check "with the bytes the job wrote" \
	test "$(sha256sum <"$D/ck.got" | cut -d' ' -f1)" = "$(cat "$D/job/blob.sha256" 2>/dev/null)"

# nobody's access is gone: a new session of that uid is refused both.
for ds in ds ck; do
	check "after the epilog nobody is refused dataset $ds" refused "$ds"
done
check "the job's grant file is gone" test ! -e "$D/state/jobs/$job.grant"

# A job that names its datasets (--comment=ringcache=ds) gets only those.
cat >"$D/job/job2.sh" <<JOB
#!/bin/bash
export PYTHONPATH=$SRC/contrib/python:$SRC/tests/python RINGCACHE_LIB=${RINGCACHE_JOB_LIB:-$BUILD/libringcache.so}
exec /usr/bin/python3 - <<'PY'
import errno, ringcache, test_binding as tb
c = ringcache.Client("$D/state/rc.sock")
with c.open("ds", "small/00007.bin") as f:
    ok = f.pread() == tb.ds_bytes("small/00007.bin")
try:
    c.writer("ck", "job2/never.pt")
    print("job2: ck was writable")
except OSError as e:
    print("job2 ok" if ok and e.errno == errno.EACCES else f"job2: {e}")
PY
JOB
chmod 0755 "$D/job/job2.sh"
job2=$(cd "$D/job" && setpriv --reuid=65534 --regid=65534 --clear-groups \
	env SLURM_CONF="$SLURM_CONF" sbatch --parsable --time=3 --comment=ringcache=ds \
	-o "$D/job/out2" -e "$D/job/out2" -D "$D/job" ./job2.sh)
for _ in $(seq 600); do
	grep -q "^$job2 " "$D/log/epilog.done" 2>/dev/null && break
	sleep 0.2
done
echo "--- job 2 output:"; cat "$D/job/out2" 2>/dev/null
check "a job with --comment=ringcache=ds reads ds and is refused ck (EACCES)" \
	grep -qx "job2 ok" "$D/job/out2"
check "its epilog revoked it too" grep -q "^$job2 0$" "$D/log/epilog.done"
check "after it nobody is refused dataset ds" refused ds
check "the daemon outlives the job (the next one starts warm)" \
	"$BUILD/ringcache" -s "$D/state/rc.sock" status
finish
