#!/usr/bin/env bash
# test_image.sh - contrib/kubernetes/Dockerfile built for real, from the
# Debian packages of this tree, and the image run as the DaemonSet runs
# it: the command, user and group, dropped capabilities, no privilege
# escalation, read-only root and the seccomp profile all read from
# ringcached-daemonset.yaml; its ConfigMap's config with the suite's S3
# and sample dataset; the config, socket and state folders bind-mounted
# as the DaemonSet's volumes. Then: the image's ringcached and ringcache
# print the package version; the readiness probe's command answers
# inside the container (under the profile, as a kubelet runs it); a
# "training pod" (uid 1000, supplemental group 2000, the host's CLI)
# reads bytes equal to awscli's and writes a checkpoint that lands in S3;
# a uid without group 2000 is refused; the ConfigMap header's reload
# (`sh -c 'kill -HUP 1'` exec'd in the container) is applied; docker
# stop drains.
#
# The engine: a running Docker daemon (docker info), else a private
# dockerd this test starts (root; data in its temp folder; no bridge, no
# iptables: builds and runs use the host's network). The base image:
# debian:12-slim where the daemon has it, else a minbase Debian 12 made
# here by mmdebstrap from the Debian mirror (RINGCACHE_DEBIAN_MIRROR,
# default deb.debian.org) and `docker import`ed: the same Debian 12
# without a registry. That tarball is kept for 7 days in
# RINGCACHE_IMAGE_CACHE (default ~/.cache/ringcache-test; empty: never
# kept) and imported from there while it is younger. The packages: RINGCACHE_DEBS (a folder holding
# ringcached_*.deb and libringcache1_*.deb of this version), else those
# the package test built from this same tree (RINGCACHE_TEST_TMP/
# package-debs), else built here by dpkg-buildpackage -b (minutes).
#
# Skips, saying why, where no engine runs and none can be started.
# Needs root, RINGCACHE_TEST_S3_* and _PREFIX with the sample dataset, a
# build (RINGCACHE_BUILD_DIR: the host's CLI and Python binding). Writes
# TAP to $RINGCACHE_TAP_FILE.
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${RINGCACHE_BUILD_DIR:-$SRC/build}" && pwd)
K8S=$SRC/contrib/kubernetes
# shellcheck source=tests/fixture/tap.sh
. "$SRC/tests/fixture/tap.sh"
skip() {
	echo "test_image: SKIP: $1"
	tap=("ok 1 - image # SKIP $1")
	finish
}

[ "$(id -u)" = 0 ] || skip "not root: the test may start dockerd and runs as other uids"
command -v docker >/dev/null || skip "no docker client (apt-get install docker.io)"
/usr/bin/python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml missing"
: "${RINGCACHE_TEST_S3_ENDPOINT:?}" "${RINGCACHE_TEST_PREFIX:?}"

D=$(mktemp -d "${RINGCACHE_TEST_TMP:-/tmp}/image.XXXXXX")
chmod 0755 "$D"
# dockerd's own folders, outside $D: their sockets must stay short, and
# $D may be a build context.
E=$(mktemp -d /tmp/rc-dockerd.XXXXXX)
DOCKERD_PID= NAME=ringcache-test-$$ TAG=
cleanup() {
	if [ -n "$TAG" ]; then
		docker rm -f "$NAME" >/dev/null 2>&1
		docker rmi -f "$TAG" >/dev/null 2>&1
	fi
	if [ -n "$DOCKERD_PID" ]; then
		kill -TERM "$DOCKERD_PID" 2>/dev/null
		for _ in $(seq 150); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$DOCKERD_PID" 2>/dev/null
		# overlay mounts a killed dockerd may leave
		grep -o " $E/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null
	fi
	[ -n "${KEEP:-}" ] && { echo "test_image: kept $D"; return; }
	rm -rf "$D" "$E"
}
trap cleanup EXIT

if docker info >/dev/null 2>&1; then
	echo "test_image: using the running Docker daemon"
else
	command -v dockerd >/dev/null ||
		skip "no container engine: docker info fails and dockerd is not installed (apt-get install docker.io)"
	dockerd --data-root "$E/data" --exec-root "$E/x" --pidfile "$E/pid" \
		-H "unix://$E/sock" --iptables=false --ip6tables=false \
		--bridge=none --ip-masq=false >"$D/dockerd.log" 2>&1 &
	DOCKERD_PID=$!
	export DOCKER_HOST=unix://$E/sock
	for _ in $(seq 300); do
		docker info >/dev/null 2>&1 && break
		kill -0 "$DOCKERD_PID" 2>/dev/null || break
		sleep 0.2
	done
	docker info >/dev/null 2>&1 ||
		skip "dockerd does not start here: $(tail -n 2 "$D/dockerd.log" | tr '\n' ' ')"
	echo "test_image: started a private dockerd ($DOCKER_HOST)"
fi

version=$(sed -n '1s/^ringcache (\([^)]*\)).*/\1/p' "$SRC/debian/changelog")

# The packages, as the Dockerfile's header builds them: those the
# package test just built from this very tree, where it ran first.
mkdir "$D/context"
reuse=${RINGCACHE_TEST_TMP:-/tmp}/package-debs
if [ -z "${RINGCACHE_DEBS:-}" ] && [ -f "$reuse/tree" ] &&
		[ "$(cat "$reuse/tree")" = "$(tree_digest "$SRC")" ]; then
	RINGCACHE_DEBS=$reuse
	echo "test_image: the packages of the package test ($reuse)"
fi
if [ -n "${RINGCACHE_DEBS:-}" ]; then
	cp "$RINGCACHE_DEBS"/ringcached_"$version"_*.deb \
		"$RINGCACHE_DEBS"/libringcache1_"$version"_*.deb "$D/context/" 2>/dev/null
else
	mkdir "$D/src"
	(cd "$SRC" && git ls-files -co --exclude-standard -z |
		xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$D/src"
	if (cd "$D/src" && DEB_BUILD_OPTIONS="nocheck parallel=2" \
			dpkg-buildpackage -b -uc -us >"$D/debs.log" 2>&1); then
		cp "$D"/ringcached_"$version"_*.deb \
			"$D"/libringcache1_"$version"_*.deb "$D/context/"
	else
		tail -n 20 "$D/debs.log" >&2
	fi
	rm -rf "$D/src"
fi
n_debs=$(ls "$D/context" | wc -l)
check "the packages ringcached and libringcache1 $version ($n_debs files)" \
	test "$n_debs" = 2
[ "$n_debs" = 2 ] || finish

# The base: what FROM names, where the daemon has it; else Debian 12
# minbase from the mirror.
base=$(sed -n 's/^ARG BASE=//p' "$K8S/Dockerfile")
build_args=()
# mmdebstrap's tarball is kept for a week in $cache (about 170 MB): it
# fetches the same hundred packages from the mirror every time, the
# longest wait of this test (a minute or two), and none of it is ours.
if [ -n "${RINGCACHE_IMAGE_CACHE+set}" ]; then
	cache=$RINGCACHE_IMAGE_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
	cache=$XDG_CACHE_HOME/ringcache-test
elif [ -n "${HOME:-}" ]; then
	cache=$HOME/.cache/ringcache-test
else
	cache=
fi
cached=${cache:+$cache/debian12-minbase.tar}
if ! docker image inspect "$base" >/dev/null 2>&1; then
	if [ -n "$cached" ] && [ -s "$cached" ] &&
			[ -z "$(find "$cached" -mtime +6)" ] &&
			docker import "$cached" "ringcache-test-base:$$" >/dev/null 2>&1; then
		pass "base: Debian 12 minbase from the mirror (mmdebstrap, $(date -u -r "$cached" +%F), kept in $cache), not in a registry"
		build_args=(--build-arg "BASE=ringcache-test-base:$$")
	else
		command -v mmdebstrap >/dev/null ||
			skip "$base is not in the daemon and mmdebstrap is missing (apt-get install mmdebstrap)"
		if mmdebstrap --variant=minbase --mode=root bookworm "$D/base.tar" \
				"${RINGCACHE_DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
				>"$D/base.log" 2>&1 &&
			docker import "$D/base.tar" "ringcache-test-base:$$" >/dev/null; then
			pass "base: Debian 12 minbase from the mirror (mmdebstrap), not in a registry"
			build_args=(--build-arg "BASE=ringcache-test-base:$$")
			# Kept whole or not at all: a copy, then a rename.
			if [ -n "$cached" ] && mkdir -p "$cache" &&
					cp "$D/base.tar" "$cached.$$" &&
					mv -f "$cached.$$" "$cached"; then
				echo "test_image: base tarball kept in $cached"
			else
				rm -f "${cached:+$cached.$$}"
			fi
		else
			failt "base: mmdebstrap of bookworm ($(tail -n 3 "$D/base.log" | tr '\n' ' '))"
			finish
		fi
		rm -f "$D/base.tar"
	fi
fi

TAG=ringcache-test:$version-$$
if docker build --network host -f "$K8S/Dockerfile" "${build_args[@]}" \
		-t "$TAG" "$D/context" >"$D/build.log" 2>&1; then
	pass "docker build -f contrib/kubernetes/Dockerfile (${build_args[*]:-FROM $base})"
else
	failt "docker build ($(tail -n 5 "$D/build.log" | tr '\n' ' '))"
	finish
fi
[ ${#build_args[@]} -gt 0 ] && docker rmi "ringcache-test-base:$$" >/dev/null 2>&1

for bin in /usr/sbin/ringcached /usr/bin/ringcache; do
	out=$(docker run --rm --network none --entrypoint "$bin" "$TAG" --version 2>&1)
	check "the image's $bin --version is $version: $out" \
		grep -q "^ringcached\? $version " <<<"$out"
done
check "the image has no FUSE (the daemon's image does not mount)" \
	docker run --rm --network none --entrypoint /bin/sh "$TAG" -c \
	'! command -v fusermount3 && ! dpkg -s fuse3 >/dev/null 2>&1'

# The DaemonSet's container as docker run arguments, and its ConfigMap's
# config with the suite's S3 and datasets (memory sized for a test).
mkdir -p "$D/config" "$D/run" "$D/state"
if ! /usr/bin/python3 - "$K8S/ringcached-daemonset.yaml" "$D" "$K8S/seccomp" \
		2>"$D/args.err" <<'PY'
import os, re, sys, yaml
path, D, seccomp = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
ds = next(d for d in docs if d["kind"] == "DaemonSet")
cm = next(d for d in docs if d["kind"] == "ConfigMap")
spec = ds["spec"]["template"]["spec"]
c = spec["containers"][0]
sc = c["securityContext"]
args = ["--user", f"{sc['runAsUser']}:{sc['runAsGroup']}"]
for cap in sc["capabilities"].get("drop", []):
    args += ["--cap-drop", cap]
for cap in sc["capabilities"].get("add", []):
    args += ["--cap-add", cap]
if sc.get("allowPrivilegeEscalation") is False:
    args += ["--security-opt", "no-new-privileges"]
if sc.get("readOnlyRootFilesystem"):
    args += ["--read-only"]
sp = sc["seccompProfile"]
assert sp["type"] == "Localhost", sp
args += ["--security-opt", "seccomp=" + os.path.join(
    seccomp, os.path.basename(sp["localhostProfile"]))]
vols = {v["name"]: v for v in spec["volumes"]}
for m in c["volumeMounts"]:
    v = vols[m["name"]]
    host = os.path.join(D, m["name"])
    ro = ",readonly" if m.get("readOnly") else ""
    args += ["--mount", f"type=bind,src={host},dst={m['mountPath']}{ro}"]
    if "configMap" in v:
        mode = v["configMap"].get("defaultMode", 0o644)
        for key, text in cm["data"].items():
            e = os.environ
            # [s3] and the datasets: the suite's; the rest as shipped.
            text = re.sub(r"(?ms)^\[s3\].*", "", text)
            text = re.sub(r"(?m)^memory = .*", "memory = 256M", text)
            text = re.sub(r"(?m)^journal_size = .*", "journal_size = 64M", text)
            text = re.sub(r"(?m)^staging_memory = .*", "staging_memory = 32M", text)
            bucket, prefix = e["RINGCACHE_TEST_S3_BUCKET"], e["RINGCACHE_TEST_PREFIX"]
            text += f"""[s3]
endpoint = {e['RINGCACHE_TEST_S3_ENDPOINT']}
region = {e['RINGCACHE_TEST_S3_REGION']}
addressing = path
tls_verify = false
credentials = config
access_key = {e['RINGCACHE_TEST_S3_ACCESS_KEY']}
secret_key = {e['RINGCACHE_TEST_S3_SECRET_KEY']}

[dataset imagenet]
uri = s3://{bucket}/{prefix}ds/
allow_uids = 1000

[dataset checkpoints]
uri = s3://{bucket}/{prefix}image-ck/
allow_uids = 1000
writable = true
write_uids = 1000
durability = local
"""
            f = os.path.join(host, key)
            with open(os.open(f, os.O_WRONLY | os.O_CREAT, mode), "w") as out:
                out.write(text)
            os.chmod(f, mode)
args += ["--entrypoint", c["command"][0]]
for name, lines in (("run", args), ("cmd", c["command"][1:]),
                    ("probe", c["readinessProbe"]["exec"]["command"])):
    with open(os.path.join(D, name + ".args"), "w") as out:
        out.write("".join(a + "\n" for a in lines))
PY
then
	failt "the DaemonSet as docker run arguments ($(cat "$D/args.err"))"
	finish
fi
mapfile -t run_args <"$D/run.args"
mapfile -t cmd_args <"$D/cmd.args"
mapfile -t probe <"$D/probe.args"
sock=${probe[2]}
hsock=$D/run/${sock##*/}

docker run -d --name "$NAME" --network host "${run_args[@]}" "$TAG" \
	"${cmd_args[@]}" >"$D/run.out" 2>&1
ready=
for _ in $(seq 300); do
	docker exec "$NAME" "${probe[@]}" >"$D/probe.out" 2>&1 && { ready=1; break; }
	[ "$(docker inspect -f '{{.State.Running}}' "$NAME" 2>/dev/null)" = true ] || break
	sleep 0.2
done
if [ -n "$ready" ]; then
	pass "the container runs as the DaemonSet's; its readiness probe (${probe[*]}) answers under the profile"
else
	failt "the container is not ready: $(cat "$D/run.out" "$D/probe.out"; docker logs "$NAME" 2>&1 | tail -n 5)"
	finish
fi
check "the socket on the host folder is 0:2000, mode 660" \
	test "$(stat -c '%u:%g %a' "$hsock")" = "0:2000 660"

export AWS_ACCESS_KEY_ID=$RINGCACHE_TEST_S3_ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$RINGCACHE_TEST_S3_SECRET_KEY
export AWS_DEFAULT_REGION=$RINGCACHE_TEST_S3_REGION
s3=s3://$RINGCACHE_TEST_S3_BUCKET/$RINGCACHE_TEST_PREFIX
key=small/00007.bin
aws --endpoint-url "$RINGCACHE_TEST_S3_ENDPOINT" s3 cp --quiet "${s3}ds/$key" \
	"$D/expected" 2>"$D/aws.err"
pod=(setpriv --reuid 1000 --regid 1000 --groups 2000 --)
"${pod[@]}" "$BUILD/ringcache" -s "$hsock" cat imagenet "$key" >"$D/got" 2>"$D/cat.err"
check "a pod's uid 1000 with group 2000 reads awscli's bytes of $key" \
	cmp -s "$D/expected" "$D/got"
if setpriv --reuid 1000 --regid 1000 --clear-groups -- \
		"$BUILD/ringcache" -s "$hsock" status >/dev/null 2>&1; then
	failt "uid 1000 without group 2000 is refused at the socket"
else
	pass "uid 1000 without group 2000 is refused at the socket"
fi

# A checkpoint through the journal on the state folder, uploaded from
# inside the confined container.
ck=ck-$$.bin
head -c $((3 << 20 | 12345)) /dev/urandom >"$D/ck"
chmod 0644 "$D/ck"
"${pod[@]}" env PYTHONPATH="$SRC/contrib/python" RINGCACHE_LIB="$BUILD/libringcache.so" \
	RINGCACHE_SOCKET="$hsock" /usr/bin/python3 - "$D/ck" "$ck" >"$D/write.out" 2>&1 <<'PY'
import sys, ringcache
with ringcache.Client() as c:
    w = c.writer("checkpoints", sys.argv[2])
    w.write(open(sys.argv[1], "rb").read())
    w.close()
    w.sync()
PY
aws --endpoint-url "$RINGCACHE_TEST_S3_ENDPOINT" s3 cp --quiet "${s3}image-ck/$ck" \
	"$D/ck.s3" 2>>"$D/aws.err"
check "a checkpoint written by the pod is in S3 with its bytes" \
	cmp -s "$D/ck" "$D/ck.s3"
[ -f "$D/ck.s3" ] || cat "$D/write.out" >&2

# The reload the ConfigMap's header documents.
printf '\n[dataset added]\nuri = s3://%s/%sds/\nallow_uids = 1000\n' \
	"$RINGCACHE_TEST_S3_BUCKET" "$RINGCACHE_TEST_PREFIX" >>"$D/config/ringcache.conf"
reload=$(sed -n 's/^#   kubectl -n ringcache exec ds\/ringcached -- //p' \
	"$K8S/ringcached-daemonset.yaml")
reloaded=
if [ -n "$reload" ] && eval "docker exec \"\$NAME\" $reload" >"$D/kill.out" 2>&1; then
	for _ in $(seq 150); do
		"${pod[@]}" "$BUILD/ringcache" -s "$hsock" ls added small/ >/dev/null 2>&1 &&
			{ reloaded=1; break; }
		sleep 0.2
	done
fi
check "the DaemonSet header's reload (exec ${reload:-missing}) applies: a dataset added is served" \
	test -n "$reloaded"
[ -n "$reloaded" ] || { cat "$D/kill.out" >&2; docker logs "$NAME" 2>&1 | tail -n 5 >&2; }

docker stop -t 60 "$NAME" >/dev/null 2>&1
code=$(docker inspect -f '{{.State.ExitCode}}' "$NAME" 2>/dev/null)
check "SIGTERM (docker stop) drains and exits 0 (exit $code)" test "$code" = 0
[ "$code" = 0 ] || docker logs "$NAME" 2>&1 | tail -n 10 >&2
finish
