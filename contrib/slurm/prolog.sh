#!/usr/bin/env bash
# prolog.sh - Slurm Prolog (slurm.conf: Prolog=/etc/slurm/ringcache/prolog.sh,
# PrologFlags=Alloc so it runs when the job is allocated): starts or reuses
# ringcached on this node and grants the job's uid its datasets before the
# job's first process runs. A failure exits non-zero: Slurm then drains
# the node and requeues the job rather than running it without its cache.
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
"$here/ringcache-slurm" start
"$here/ringcache-slurm" grant "$SLURM_JOB_ID" "$SLURM_JOB_UID"
