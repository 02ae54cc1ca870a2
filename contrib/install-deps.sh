#!/usr/bin/env bash
# install-deps.sh - installs what ringcache needs to build, test and (with
# options) benchmark, from Debian packages. Idempotent: apt is not touched
# when every package is already installed.
#
# usage: contrib/install-deps.sh [--perf] [--python] [--cluster] [--package]
#   --perf    also the benchmark peers (s3fs, rclone, fio, gnuplot)
#   --python  also python3-torch, -cffi, -numpy, -fsspec, -pil, -torchvision
#             (binding, PyTorch, fsspec, the mount's ImageFolder test)
#   --cluster also slurm-wlm, munge, python3-yaml, yamllint, strace,
#             python3-seccomp, docker.io, mmdebstrap (contrib/slurm and
#             contrib/kubernetes tests; the Slurm test starts its own
#             daemons, the image test its own dockerd if none runs)
#   --package also debhelper, dpkg-dev, lintian (tests/package builds debian/
#             and runs lintian on the packages)
set -euo pipefail

packages=(
	build-essential meson ninja-build pkgconf
	liburing-dev libcurl4-openssl-dev libssl-dev libnuma-dev
	libjemalloc-dev libcriterion-dev libexpat1-dev libjansson-dev
	libfuse3-dev fuse3 # `ringcache mount` (optional in meson, on in tests/run)
	ceph-mon ceph-osd radosgw ceph-common
	curl ca-certificates python3 bc
	groff-base man-db # tests/docs/check_man.py renders the manual pages
	python3-dev # the binding's C extension (ringcache._native; optional in meson)
	awscli # the tests read S3 back with an independent client
	prometheus # promtool: the tests check the metrics endpoint's real output
	clang libclang-rt-14-dev # tests/run's libFuzzer build (tests/fuzz)
)
perf_packages=(s3fs rclone fio gnuplot-nox)
python_packages=(python3-torch python3-cffi python3-numpy python3-fsspec
	python3-pil python3-torchvision)
cluster_packages=(slurm-wlm munge python3-yaml yamllint strace python3-seccomp
	docker.io mmdebstrap)
package_packages=(debhelper dpkg-dev lintian) # tests/package: dpkg-buildpackage -b, lintian

usage() {
	sed -n '6,15p' "$0" | sed 's/^# \{0,1\}//'
}

for arg in "$@"; do
	case "$arg" in
	--perf) packages+=("${perf_packages[@]}") ;;
	--python) packages+=("${python_packages[@]}") ;;
	--cluster) packages+=("${cluster_packages[@]}") ;;
	--package) packages+=("${package_packages[@]}") ;;
	-h|--help) usage; exit 0 ;;
	*) echo "install-deps.sh: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
	esac
done

is_installed() {
	[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

missing=()
for p in "${packages[@]}"; do
	is_installed "$p" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#packages[@]} packages already installed"
	exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "install-deps: not root and no sudo; install as root: ${missing[*]}" >&2
		exit 1
	fi
	as_root=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
	apt-get install -y --no-install-recommends "${missing[@]}"
echo "install-deps: done"
