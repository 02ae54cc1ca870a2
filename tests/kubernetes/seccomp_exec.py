#!/usr/bin/python3
"""seccomp_exec.py - runs a command under a seccomp profile in the JSON
format Kubernetes' Localhost profiles use (defaultAction,
defaultErrnoRet, syscalls[].names/action; no argument conditions), as
the container runtime would load it: libseccomp (python3-seccomp),
no_new_privs, then exec.

usage: seccomp_exec.py PROFILE CMD [ARGS...]
"""
import json
import os
import sys

import seccomp

ACTIONS = {"SCMP_ACT_ALLOW": seccomp.ALLOW, "SCMP_ACT_LOG": seccomp.LOG}


def main():
    prof = json.load(open(sys.argv[1]))
    assert prof["defaultAction"] == "SCMP_ACT_ERRNO", prof["defaultAction"]
    f = seccomp.SyscallFilter(seccomp.ERRNO(prof.get("defaultErrnoRet", 1)))
    for rule in prof["syscalls"]:
        assert not rule.get("args"), "argument conditions are not handled"
        for name in rule["names"]:
            try:
                f.add_rule(ACTIONS[rule["action"]], name)
            except (RuntimeError, ValueError):
                pass  # not a call of this architecture: runc skips it too
    f.load()
    os.execv(sys.argv[2], sys.argv[2:])


if __name__ == "__main__":
    main()
