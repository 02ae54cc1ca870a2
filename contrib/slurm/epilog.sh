#!/usr/bin/env bash
# epilog.sh - Slurm Epilog (slurm.conf: Epilog=/etc/slurm/ringcache/epilog.sh):
# after the job's processes are gone, waits until S3 has every checkpoint
# committed through the node's daemon (ringcache sync), checks that no
# upload failed while the job ran, then takes the job's grant away. The
# node is not released before both are done; a failed sync still revokes,
# then exits non-zero so Slurm drains the node and an operator sees that a
# checkpoint did not reach S3. The daemon keeps running: the next job
# starts with a warm cache.
set -uo pipefail
here=$(dirname "$(readlink -f "$0")")
rc=0
"$here/ringcache-slurm" sync "$SLURM_JOB_ID" || rc=1
"$here/ringcache-slurm" revoke "$SLURM_JOB_ID" || rc=1
exit $rc
