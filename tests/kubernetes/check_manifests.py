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
pod's uid may read the datasets it names. Least privilege: the socket is
not world-accessible, its group (the daemon's runAsGroup) is one the
training pod has; no capability but IPC_LOCK with mlock = true; a
Localhost seccomp profile (contrib/kubernetes/seccomp), not Unconfined,
that denies by default, allows io_uring and every call a traced daemon
made (trace_syscalls.sh under strace), and under which the daemon really
serves as the DaemonSet runs it (uid 0 without capabilities, gid 2000,
the profile loaded by seccomp_exec.py: reads, a checkpoint, a reload,
the socket's group let in, others refused). The image recipe
(Dockerfile) is Debian 12 installing this repository's packages, whose
files the DaemonSet runs, tagged with the package version. The kustomize
base renders (kubectl kustomize, offline) to the DaemonSet file's
objects. Not checked here: that a kubelet accepts the objects, the node
labels; that the image builds and runs as the DaemonSet does is
tests/kubernetes/test_image.sh (a container engine).

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
KUSTOMIZATION = "kustomization.yaml"
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
    files = sorted(f for f in os.listdir(K8S) if f.endswith(".yaml")
                   and f != KUSTOMIZATION)
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
                            *[os.path.join(K8S, f)
                              for f in files + [KUSTOMIZATION]]],
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
        # --offline: the ConfigMap names AWS; a test sends nothing there.
        r = subprocess.run([os.path.join(BUILD, "ringcached"),
                            "--check-config", path, "--offline"],
                           stdout=subprocess.PIPE,
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
    least_privilege(ds, cm, pod, conf)
    image_and_base(ds)
    tap_file = os.environ.get("RINGCACHE_TAP_FILE")
    if tap_file:
        os.makedirs(os.path.dirname(tap_file), exist_ok=True)
        with open(tap_file, "w") as f:
            f.write(f"1..{len(tap)}\n" + "\n".join(tap) + "\n")
    return 1 if any(t.startswith("not ok") for t in tap) else 0


def read(*path):
    with open(os.path.join(SRC, *path)) as f:
        return f.read()


def least_privilege(ds, cm, pod, conf):
    spec = pod_spec(ds)
    sc = spec["containers"][0]["securityContext"]
    mode = (ini_values(conf, "daemon", "socket_mode") or ["0660"])[0]
    check(f"the socket is not world-accessible (socket_mode {mode})",
          int(mode, 8) & 0o007 == 0)
    gid = sc.get("runAsGroup")
    psc = pod["spec"].get("securityContext", {})
    check(f"the training pod has the socket's group (the daemon's gid {gid})",
          gid is not None and (gid in psc.get("supplementalGroups", []) or
                               psc.get("runAsGroup") == gid),
          f"supplementalGroups {psc.get('supplementalGroups')}")
    caps = sc.get("capabilities", {})
    mlock = (ini_values(conf, "daemon", "mlock") or ["false"])[0] in (
        "true", "yes", "on", "1")
    added = set(caps.get("add", []))
    check("every capability dropped; IPC_LOCK only with mlock = true",
          caps.get("drop") == ["ALL"] and
          added <= ({"IPC_LOCK"} if mlock else set()), f"add {sorted(added)}")
    check("no privilege escalation, read-only root",
          sc.get("allowPrivilegeEscalation") is False and
          sc.get("readOnlyRootFilesystem") is True)
    sp = sc.get("seccompProfile", {})
    name = os.path.basename(sp.get("localhostProfile", ""))
    path = os.path.join(K8S, "seccomp", name)
    check(f"seccomp: Localhost {sp.get('localhostProfile')}, shipped here",
          sp.get("type") == "Localhost" and name and os.path.isfile(path),
          str(sp))
    if not (name and os.path.isfile(path)):
        return
    import json
    prof = json.load(open(path))
    allowed = {n for r in prof["syscalls"] if r["action"] == "SCMP_ACT_ALLOW"
               and not r.get("args") for n in r["names"]}
    check("the profile denies by default and allows io_uring",
          prof["defaultAction"] == "SCMP_ACT_ERRNO" and
          {"io_uring_setup", "io_uring_enter", "io_uring_register"} <= allowed)
    trace = os.path.join(SRC, "tests", "kubernetes", "trace_syscalls.sh")
    exe = os.path.join(BUILD, "ringcached")
    # A sanitizer's runtime makes calls of its own the image's daemon
    # does not: the profile is checked against the plain build only.
    sanitized = os.environ.get("RINGCACHE_SANITIZE", "none") != "none"
    if sanitized:
        check("trace and confined run # SKIP a sanitized build "
              f"({os.environ['RINGCACHE_SANITIZE']})", True)
        return
    if shutil.which("strace") and os.path.exists(exe):
        r = subprocess.run(["bash", trace, BUILD], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=240)
        used = set(r.stdout.split())
        check(f"the profile allows each of the {len(used)} calls a traced "
              "ringcached made", r.returncode == 0 and len(used) > 20 and
              used <= allowed, r.stderr.strip()[-300:] or
              "not allowed: " + " ".join(sorted(used - allowed)))
    else:
        check("trace # SKIP strace or the build missing", True)
    try:
        import seccomp  # noqa: F401  (python3-seccomp)
        confinable = os.geteuid() == 0 and shutil.which("setpriv")
    except ImportError:
        confinable = False
    if confinable and os.path.exists(exe):
        r = subprocess.run(["bash", trace, BUILD, "--confined", path],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=240)
        check("ringcached serves as the DaemonSet runs it (no capability, "
              "gid 2000, under the profile)", r.returncode == 0,
              r.stdout.strip()[-600:])
    else:
        check("confined run # SKIP needs root, setpriv and python3-seccomp",
              True)


def image_and_base(ds):
    spec = pod_spec(ds)
    daemon = spec["containers"][0]
    version = re.match(r"ringcache \(([^)]+)\)", read("debian", "changelog"))
    version = version.group(1) if version else "?"
    check(f"the DaemonSet's image is tagged with the package version {version}",
          daemon["image"].endswith(":" + version), daemon["image"])
    dockerfile = read("contrib", "kubernetes", "Dockerfile")
    # FROM names Debian 12, itself or through an ARG's default.
    base = re.search(r"^FROM (\S+)\s*$", dockerfile, re.M)
    base = base.group(1) if base else ""
    arg = re.fullmatch(r"\$\{?(\w+)\}?", base)
    if arg:
        default = re.search(rf"^ARG {arg.group(1)}=(\S+)\s*$", dockerfile, re.M)
        base = default.group(1) if default else ""
    check(f"the image recipe is Debian 12 (FROM {base})",
          re.fullmatch(r"debian:(12|bookworm)\S*", base))
    packages = re.findall(r"^Package: (\S+)", read("debian", "control"), re.M)
    copied = [m for line in re.findall(r"^COPY (.*)$", dockerfile, re.M)
              for m in re.findall(r"(\S+?)_\*\.deb", line)]
    check(f"it installs packages debian/control builds ({', '.join(copied)})",
          "ringcached" in copied and set(copied) <= set(packages))
    shipped = {"/" + line.strip() for pkg in copied
               if os.path.exists(os.path.join(SRC, "debian", pkg + ".install"))
               for line in read("debian", pkg + ".install").splitlines()}
    run = [daemon["command"][0]] + [daemon[p]["exec"]["command"][0] for p in
                                    ("readinessProbe", "livenessProbe")]
    check("the DaemonSet runs files those packages install",
          all(r in shipped for r in run), f"{run} vs {sorted(shipped)}")
    entry = re.search(r'^ENTRYPOINT \["([^"]+)"', dockerfile, re.M)
    check("the image's ENTRYPOINT is the DaemonSet's command",
          entry and entry.group(1) == daemon["command"][0])
    kust = yaml.safe_load(read("contrib", "kubernetes", KUSTOMIZATION))
    res = kust.get("resources", [])
    check("the kustomize base's resources are here",
          res and all(os.path.isfile(os.path.join(K8S, r)) for r in res), res)
    kubectl = shutil.which("kubectl")
    if kubectl:
        r = subprocess.run([kubectl, "kustomize", K8S], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        got = sorted((d["kind"], d["metadata"]["name"])
                     for d in yaml.safe_load_all(r.stdout) if d) \
            if r.returncode == 0 else []
        want = sorted((d["kind"], d["metadata"]["name"])
                      for f in res for d in load(f))
        check("kubectl kustomize renders the base to its objects",
              r.returncode == 0 and got == want, r.stderr.strip() or
              f"{got} vs {want}")
    else:
        check("kubectl kustomize # SKIP kubectl not installed", True)


if __name__ == "__main__":
    sys.exit(main())
