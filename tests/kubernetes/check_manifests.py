#!/usr/bin/python3
"""check_manifests.py - offline checks of contrib/kubernetes (no cluster
here: kubectl needs an API server even for --dry-run=client, and no
schema validator is packaged): the YAML parses (python3-yaml) and passes
yamllint where Debian's yamllint is installed; the objects are the kinds
and API versions Kubernetes serves; the DaemonSet's selector matches its
pods; every volume mount names a volume; the ConfigMap's ringcache.conf
passes `ringcached --check-config`; and the paths agree: the config's
socket lies in the folder both pods mount from the same hostPath, the
probes and the training pod's RINGCACHE_SOCKET name it, and the training
pod's uid may read the datasets it names. Not checked: that a kubelet
accepts the objects, the image, the node labels, io_uring under the
container runtime's seccomp profile.

Run: /usr/bin/python3 tests/kubernetes/check_manifests.py (meson test
kubernetes sets RINGCACHE_BUILD_DIR and RINGCACHE_TAP_FILE).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K8S = os.path.join(SRC, "contrib", "kubernetes")
BUILD = os.environ.get("RINGCACHE_BUILD_DIR", os.path.join(SRC, "build"))
SERVED = {("v1", "Namespace"), ("v1", "ConfigMap"), ("v1", "Pod"),
          ("apps/v1", "DaemonSet")}
tap = []


def check(name, ok, why=""):
    tap.append(f"{'ok' if ok else 'not ok'} {len(tap) + 1} - {name}"
               + ("" if ok or not why else f" ({why})"))
    print(tap[-1])


def load(name):
    with open(os.path.join(K8S, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def by_kind(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"one {kind} expected, found {len(found)}"
    return found[0]


def ini_values(text, section, key):
    cur, out = None, []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            cur = line.strip("[]")
        elif "=" in line and not line.startswith((";", "#")):
            k, _, v = line.partition("=")
            if cur == section and k.strip() == key:
                out.append(v.strip())
    return out


def pod_spec(obj):
    return obj["spec"]["template"]["spec"] if obj["kind"] == "DaemonSet" \
        else obj["spec"]


def mounts_resolve(obj):
    spec = pod_spec(obj)
    volumes = {v["name"] for v in spec.get("volumes", [])}
    return all(m["name"] in volumes for c in spec["containers"]
               for m in c.get("volumeMounts", []))


def host_path_at(obj, mount_path):
    spec = pod_spec(obj)
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    for c in spec["containers"]:
        for m in c.get("volumeMounts", []):
            if m["mountPath"] == mount_path:
                return vols[m["name"]].get("hostPath", {}).get("path")
    return None


def main():
    files = sorted(f for f in os.listdir(K8S) if f.endswith(".yaml"))
    docs = {}
    for f in files:
        try:
            docs[f] = load(f)
            check(f"{f} parses", True)
        except (yaml.YAMLError, KeyError, OSError) as e:
            check(f"{f} parses", False, str(e))
            docs[f] = []
    lint = shutil.which("yamllint")
    if lint:
        r = subprocess.run([lint, "-s", "-d", "{extends: default, rules: "
                            "{document-start: disable, line-length: {max: 100}}}",
                            *[os.path.join(K8S, f) for f in files]],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        check("yamllint", r.returncode == 0, r.stdout.strip())
    else:
        check("yamllint # SKIP not installed (apt-get install yamllint)",
              True)
    every = [d for f in files for d in docs[f]]
    for d in every:
        check(f"{d['kind']} {d['metadata']['name']}: a served apiVersion",
              (d["apiVersion"], d["kind"]) in SERVED, d["apiVersion"])
        if d["kind"] in ("DaemonSet", "Pod"):
            check(f"{d['kind']} {d['metadata']['name']}: mounts name volumes",
                  mounts_resolve(d))
    ds = by_kind(every, "DaemonSet")
    cm = by_kind(every, "ConfigMap")
    pod = by_kind(every, "Pod")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    check("DaemonSet selector matches its pods", all(
        labels.get(k) == v
        for k, v in ds["spec"]["selector"]["matchLabels"].items()))
    conf = cm["data"]["ringcache.conf"]
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, "ringcache.conf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(conf)
        r = subprocess.run([os.path.join(BUILD, "ringcached"),
                            "--check-config", path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        check("ConfigMap ringcache.conf passes ringcached --check-config",
              r.returncode == 0, r.stdout.strip())
    finally:
        shutil.rmtree(tmp)
    sock = (ini_values(conf, "daemon", "socket") or
            ["/run/ringcache/ringcache.sock"])[0]
    sock_dir = os.path.dirname(sock)
    daemon = ds["spec"]["template"]["spec"]["containers"][0]
    probes = [daemon[p]["exec"]["command"] for p in
              ("readinessProbe", "livenessProbe")]
    check("probes ask the daemon's socket for status",
          all(c[-3:] == ["-s", sock, "status"] for c in probes), probes)
    check("daemon's config is the ConfigMap's file", any(
        m["mountPath"] == "/etc/ringcache" and m["name"] == "config"
        for m in daemon["volumeMounts"]) and
        daemon["command"][-1] == "/etc/ringcache/ringcache.conf")
    host = host_path_at(ds, sock_dir)
    check("both pods mount the socket folder from one hostPath",
          host is not None and host == host_path_at(pod, sock_dir),
          f"{host} vs {host_path_at(pod, sock_dir)}")
    trainer = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in trainer.get("env", [])}
    check("training pod's RINGCACHE_SOCKET is the socket",
          env.get("RINGCACHE_SOCKET") == sock, env.get("RINGCACHE_SOCKET"))
    uid = str(pod["spec"]["securityContext"]["runAsUser"])
    named = [m.group(2) for a in trainer["command"]
             for m in [re.match(r"--(dataset|checkpoints)=(.+)", a)] if m]
    for name in named:
        allowed = ",".join(ini_values(conf, f"dataset {name}", "allow_uids"))
        check(f"uid {uid} may read dataset {name}",
              uid in [u.strip() for u in allowed.split(",")] or
              allowed.strip() == "*", allowed)
    tap_file = os.environ.get("RINGCACHE_TAP_FILE")
    if tap_file:
        os.makedirs(os.path.dirname(tap_file), exist_ok=True)
        with open(tap_file, "w") as f:
            f.write(f"1..{len(tap)}\n" + "\n".join(tap) + "\n")
    return 1 if any(t.startswith("not ok") for t in tap) else 0


if __name__ == "__main__":
    sys.exit(main())
