/* topology.c - owns the machine's topology: reading it from sysfs or from
 * a description, GPU-to-node overrides, shard placement, and binding a
 * shard's thread and memory to its node. Knows nothing of what a shard
 * does. */
#include "topology.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <numaif.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cuda_visible.h"
#include "log.h"

#define NODE_DIR "/sys/devices/system/node"
#define PCI_DIR "/sys/bus/pci/devices"
#define CPU_ONLINE "/sys/devices/system/cpu/online"
#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_CLASS_VGA 0x0300
#define PCI_CLASS_3D 0x0302
/* Node ids the mbind mask can name (the kernel's MAX_NUMNODES is <= 1024). */
#define NODE_MASK_BITS 1024
#define DELIM " \t\r"
#define LONG_BITS (sizeof(unsigned long) * CHAR_BIT)

/* Formats a path into a PATH_MAX buffer. A path that does not fit becomes
 * "", which no open finds (roots are checked to leave room, so it would
 * take a bug). */
static void pathf(char *buf, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void pathf(char *buf, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, PATH_MAX, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= PATH_MAX)
		buf[0] = '\0';
}

/* ---- parsing helpers -------------------------------------------------- */

static int parse_int(const char *s, long max, long *out)
{
	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	char *end;
	long v = strtol(s, &end, 10);
	if (errno || *end != '\0' || v > max)
		return -1;
	*out = v;
	return 0;
}

int topology_parse_cpulist(const char *s, cpu_set_t *out)
{
	CPU_ZERO(out);
	while (*s && *s != '\n') {
		char *end;
		if (!isdigit((unsigned char)*s))
			return -1;
		unsigned long lo = strtoul(s, &end, 10), hi = lo;
		if (*end == '-') {
			if (!isdigit((unsigned char)end[1]))
				return -1;
			hi = strtoul(end + 1, &end, 10);
		}
		if (hi < lo || hi >= CPU_SETSIZE)
			return -1;
		for (unsigned long c = lo; c <= hi; c++)
			CPU_SET(c, out);
		if (*end == ',' && end[1] != '\0' && end[1] != '\n')
			end++;
		else if (*end != '\0' && *end != '\n')
			return -1;
		s = end;
	}
	return 0;
}

/* Reads a small sysfs file into buf, NUL-terminated. 0 or -errno. */
static int read_small_file(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	size_t n = fread(buf, 1, len - 1, f);
	int failed = ferror(f);
	fclose(f);
	if (failed)
		return -EIO;
	buf[n] = '\0';
	return 0;
}

/* The kB value after key (e.g. "MemTotal:") in a meminfo file. */
static int read_meminfo_total(const char *path, uint64_t *bytes)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	char line[256];
	int rc = -EINVAL;
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "MemTotal:");
		unsigned long long kb;
		if (p && sscanf(p + strlen("MemTotal:"), "%llu", &kb) == 1) {
			*bytes = (uint64_t)kb * 1024;
			rc = 0;
			break;
		}
	}
	fclose(f);
	return rc;
}

/* ---- building the struct ---------------------------------------------- */

static struct topology_node *find_node(struct topology *t, int id)
{
	for (int i = 0; i < t->n_nodes; i++)
		if (t->nodes[i].id == id)
			return &t->nodes[i];
	return NULL;
}

static int node_shard(const struct topology *t, int id)
{
	for (int i = 0; i < t->n_nodes; i++)
		if (t->nodes[i].id == id)
			return t->nodes[i].shard;
	return -1;
}

static int cmp_node_id(const void *a, const void *b)
{
	const struct topology_node *x = a, *y = b;
	return (x->id > y->id) - (x->id < y->id);
}

/* Sorts the nodes and numbers the shards: nodes with CPUs and memory. */
static int assign_shards(struct topology *t, char *err, size_t errlen)
{
	qsort(t->nodes, (size_t)t->n_nodes, sizeof(t->nodes[0]), cmp_node_id);
	t->n_shards = 0;
	for (int i = 0; i < t->n_nodes; i++) {
		struct topology_node *n = &t->nodes[i];
		bool usable = n->mem_bytes > 0 && CPU_COUNT(&n->cpus) > 0;
		n->shard = usable ? t->n_shards++ : -1;
	}
	if (t->n_shards == 0) {
		rc_set_err(err, errlen, "no NUMA node has both CPUs and memory");
		return -1;
	}
	return 0;
}

/* ---- sysfs ------------------------------------------------------------ */

/* A node's CPUs (a cpulist file) and memory (a meminfo file's MemTotal). */
static int read_node_files(struct topology_node *n, const char *cpulist,
			   const char *meminfo, char *err, size_t errlen)
{
	char buf[4096];
	if (read_small_file(cpulist, buf, sizeof(buf)) < 0 ||
	    topology_parse_cpulist(buf, &n->cpus) < 0) {
		rc_set_err(err, errlen, "%s: unreadable or not a cpu list",
			   cpulist);
		return -1;
	}
	if (read_meminfo_total(meminfo, &n->mem_bytes) < 0) {
		rc_set_err(err, errlen, "%s: no MemTotal", meminfo);
		return -1;
	}
	return 0;
}

static int sysfs_add_node(struct topology *t, const char *dir, int id,
			  char *err, size_t errlen)
{
	if (t->n_nodes == TOPOLOGY_MAX_NODES) {
		rc_set_err(err, errlen, "%s: more than %d NUMA nodes", dir,
			   TOPOLOGY_MAX_NODES);
		return -1;
	}
	struct topology_node *n = &t->nodes[t->n_nodes++];
	n->id = id;
	char cpulist[PATH_MAX], meminfo[PATH_MAX];
	pathf(cpulist, "%s/node%d/cpulist", dir, id);
	pathf(meminfo, "%s/node%d/meminfo", dir, id);
	return read_node_files(n, cpulist, meminfo, err, errlen);
}

/* A kernel without CONFIG_NUMA has no node directory: one node 0. */
static int sysfs_single_node(struct topology *t, const char *root, char *err,
			     size_t errlen)
{
	struct topology_node *n = &t->nodes[t->n_nodes++];
	char cpulist[PATH_MAX], meminfo[PATH_MAX];
	pathf(cpulist, "%s" CPU_ONLINE, root);
	pathf(meminfo, "%s/proc/meminfo", root);
	return read_node_files(n, cpulist, meminfo, err, errlen);
}

static int sysfs_read_nodes(struct topology *t, const char *root, char *err,
			    size_t errlen)
{
	char dir[PATH_MAX];
	pathf(dir, "%s" NODE_DIR, root);
	DIR *d = opendir(dir);
	if (!d && errno == ENOENT)
		return sysfs_single_node(t, root, err, errlen);
	if (!d) {
		rc_set_err(err, errlen, "%s: %s", dir, strerror(errno));
		return -1;
	}
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		long id;
		if (strncmp(e->d_name, "node", 4) == 0 &&
		    parse_int(e->d_name + 4, INT_MAX, &id) == 0)
			rc = sysfs_add_node(t, dir, (int)id, err, errlen);
	}
	closedir(d);
	return rc;
}

/* Reads a sysfs attribute holding one integer ("0x10de", "-1"). */
static int read_attr_long(const char *dev, const char *attr, long *out)
{
	char path[PATH_MAX], buf[64];
	pathf(path, "%s/%s", dev, attr);
	if (read_small_file(path, buf, sizeof(buf)) < 0)
		return -1;
	char *end;
	errno = 0;
	*out = strtol(buf, &end, 0);
	return errno || end == buf ? -1 : 0;
}

static bool pci_is_cuda_gpu(const char *dev)
{
	long vendor, cls;
	if (read_attr_long(dev, "vendor", &vendor) < 0 ||
	    read_attr_long(dev, "class", &cls) < 0)
		return false;
	long base_sub = cls >> 8; /* drop the programming interface */
	return vendor == PCI_VENDOR_NVIDIA &&
	       (base_sub == PCI_CLASS_VGA || base_sub == PCI_CLASS_3D);
}

static int cmp_pci(const void *a, const void *b)
{
	return pci_addr_cmp(((const struct topology_gpu *)a)->pci,
			    ((const struct topology_gpu *)b)->pci);
}

static int sysfs_add_gpu(struct topology *t, const char *dev,
			 const char *addr, char *err, size_t errlen)
{
	if (t->n_gpus == TOPOLOGY_MAX_GPUS) {
		rc_set_err(err, errlen, "%s: more than %d GPUs", dev,
			   TOPOLOGY_MAX_GPUS);
		return -1;
	}
	long node;
	if (read_attr_long(dev, "numa_node", &node) < 0 ||
	    !find_node(t, (int)node))
		node = t->nodes[0].id; /* -1: the firmware did not say */
	struct topology_gpu *g = &t->gpus[t->n_gpus++];
	snprintf(g->pci, sizeof(g->pci), "%s", addr);
	g->node = (int)node;
	return 0;
}

static int sysfs_read_gpus(struct topology *t, const char *root, char *err,
			   size_t errlen)
{
	char dir[PATH_MAX];
	pathf(dir, "%s" PCI_DIR, root);
	DIR *d = opendir(dir);
	if (!d)
		return 0; /* no PCI bus (some containers): no GPUs */
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		char dev[PATH_MAX];
		if (e->d_name[0] == '.' || strlen(e->d_name) >= TOPOLOGY_PCI_LEN)
			continue;
		pathf(dev, "%s/%s", dir, e->d_name);
		if (pci_is_cuda_gpu(dev))
			rc = sysfs_add_gpu(t, dev, e->d_name, err, errlen);
	}
	closedir(d);
	qsort(t->gpus, (size_t)t->n_gpus, sizeof(t->gpus[0]), cmp_pci);
	return rc;
}

int topology_from_sysfs(struct topology *t, const char *root, char *err,
			size_t errlen)
{
	memset(t, 0, sizeof(*t));
	if (strcmp(root, "/") == 0)
		root = ""; /* paths below start with '/' */
	if (strlen(root) > PATH_MAX / 2) {
		rc_set_err(err, errlen, "%s: path too long", root);
		return -1;
	}
	if (sysfs_read_nodes(t, root, err, errlen) < 0)
		return -1;
	/* GPU nodes are checked against the nodes, so sort those first. */
	if (assign_shards(t, err, errlen) < 0)
		return -1;
	return sysfs_read_gpus(t, root, err, errlen);
}

/* ---- description ------------------------------------------------------ */

struct desc_parser {
	struct topology *t;
	int line;
	bool gpu_seen[TOPOLOGY_MAX_GPUS];
	char *err;
	size_t errlen;
};

static int desc_fail(struct desc_parser *p, const char *what, const char *tok)
{
	rc_set_err(p->err, p->errlen, "line %d: %s%s%s%s", p->line, what,
		   tok ? " '" : "", tok ? tok : "", tok ? "'" : "");
	return -1;
}

/* "node ID [cpus LIST] [mem SIZE]" */
static int desc_node(struct desc_parser *p, char **save)
{
	struct topology *t = p->t;
	char *tok = strtok_r(NULL, DELIM, save);
	long id;
	if (!tok || parse_int(tok, NODE_MASK_BITS - 1, &id) < 0)
		return desc_fail(p, "node needs an id from 0 to 1023, not", tok);
	if (find_node(t, (int)id))
		return desc_fail(p, "node declared twice:", tok);
	if (t->n_nodes == TOPOLOGY_MAX_NODES)
		return desc_fail(p, "too many nodes", NULL);
	struct topology_node *n = &t->nodes[t->n_nodes++];
	n->id = (int)id;
	while ((tok = strtok_r(NULL, DELIM, save))) {
		char *val = strtok_r(NULL, DELIM, save);
		if (!val)
			return desc_fail(p, "no value after", tok);
		if (strcmp(tok, "cpus") == 0) {
			if (topology_parse_cpulist(val, &n->cpus) < 0)
				return desc_fail(p, "bad cpu list", val);
		} else if (strcmp(tok, "mem") == 0) {
			if (config_parse_size(val, &n->mem_bytes) < 0)
				return desc_fail(p, "bad size (e.g. 64G)", val);
		} else {
			return desc_fail(p, "expected cpus or mem, not", tok);
		}
	}
	return 0;
}

/* "gpu INDEX node ID [pci ADDR]" */
static int desc_gpu(struct desc_parser *p, char **save)
{
	struct topology *t = p->t;
	char *tok = strtok_r(NULL, DELIM, save);
	long idx, node;
	if (!tok || parse_int(tok, TOPOLOGY_MAX_GPUS - 1, &idx) < 0)
		return desc_fail(p, "gpu needs an index from 0 to 63, not", tok);
	if (p->gpu_seen[idx])
		return desc_fail(p, "gpu declared twice:", tok);
	p->gpu_seen[idx] = true;
	struct topology_gpu *g = &t->gpus[idx];
	tok = strtok_r(NULL, DELIM, save);
	if (!tok || strcmp(tok, "node") != 0)
		return desc_fail(p, "expected 'node ID' after the gpu index", NULL);
	tok = strtok_r(NULL, DELIM, save);
	if (!tok || parse_int(tok, INT_MAX, &node) < 0 || !find_node(t, (int)node))
		return desc_fail(p, "gpu on an undeclared node", tok);
	g->node = (int)node;
	if (idx >= t->n_gpus)
		t->n_gpus = (int)idx + 1;
	tok = strtok_r(NULL, DELIM, save);
	if (tok && strcmp(tok, "pci") == 0) {
		tok = strtok_r(NULL, DELIM, save);
		if (!tok || strlen(tok) >= TOPOLOGY_PCI_LEN)
			return desc_fail(p, "bad pci address", tok);
		snprintf(g->pci, sizeof(g->pci), "%s", tok);
		tok = strtok_r(NULL, DELIM, save);
	}
	return tok ? desc_fail(p, "unexpected", tok) : 0;
}

static int desc_line(struct desc_parser *p, char *line)
{
	char *hash = strchr(line, '#');
	if (hash)
		*hash = '\0';
	char *save;
	char *tok = strtok_r(line, DELIM, &save);
	if (!tok)
		return 0;
	if (strcmp(tok, "node") == 0)
		return desc_node(p, &save);
	if (strcmp(tok, "gpu") == 0)
		return desc_gpu(p, &save);
	return desc_fail(p, "expected node or gpu, not", tok);
}

int topology_from_description(struct topology *t, const char *text,
			      char *err, size_t errlen)
{
	memset(t, 0, sizeof(*t));
	struct desc_parser p = {.t = t, .err = err, .errlen = errlen};
	for (const char *s = text; *s;) {
		char line[512];
		size_t len = strcspn(s, "\n");
		p.line++;
		if (len >= sizeof(line))
			return desc_fail(&p, "line too long", NULL);
		memcpy(line, s, len);
		line[len] = '\0';
		if (desc_line(&p, line) < 0)
			return -1;
		s += len + (s[len] == '\n');
	}
	for (int i = 0; i < t->n_gpus; i++)
		if (!p.gpu_seen[i]) {
			rc_set_err(err, errlen, "gpu %d is not described "
				   "(GPUs are numbered 0..%d)", i,
				   t->n_gpus - 1);
			return -1;
		}
	return assign_shards(t, err, errlen);
}

/* ---- overrides and placement ------------------------------------------ */

int topology_override_gpu(struct topology *t, int gpu, int node)
{
	if (gpu < 0 || gpu >= t->n_gpus || !find_node(t, node))
		return -EINVAL;
	t->gpus[gpu].node = node;
	return 0;
}

int topology_shard_count(const struct topology *t)
{
	return t->n_shards;
}

int topology_shard_for(const struct topology *t, int gpu, int numa_node_hint,
		       bool *fell_back)
{
	int shard = -1;
	if (gpu >= 0 && gpu < t->n_gpus)
		shard = node_shard(t, t->gpus[gpu].node);
	if (shard < 0 && numa_node_hint >= 0)
		shard = node_shard(t, numa_node_hint);
	if (fell_back)
		*fell_back = shard < 0 && (gpu >= 0 || numa_node_hint >= 0);
	return shard < 0 ? 0 : shard;
}

static const struct topology_node *shard_node(const struct topology *t,
					      int shard)
{
	for (int i = 0; i < t->n_nodes; i++)
		if (shard >= 0 && t->nodes[i].shard == shard)
			return &t->nodes[i];
	return NULL;
}

int topology_shard_node(const struct topology *t, int shard)
{
	const struct topology_node *n = shard_node(t, shard);
	return n ? n->id : -1;
}

int topology_shard_cpus(const struct topology *t, int shard, cpu_set_t *out)
{
	const struct topology_node *n = shard_node(t, shard);
	if (!n)
		return -EINVAL;
	*out = n->cpus;
	return 0;
}

/* ---- binding ---------------------------------------------------------- */

int topology_bind_thread(const struct topology *t, int shard)
{
	cpu_set_t want, allowed;
	if (topology_shard_cpus(t, shard, &want) < 0)
		return -EINVAL;
	/* A cpuset cgroup (Kubernetes, Slurm) may own only some of the
	 * node's CPUs: pin to those, fail only if it owns none. */
	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
		return -errno;
	CPU_AND(&want, &want, &allowed);
	if (CPU_COUNT(&want) == 0)
		return -EINVAL;
	return -pthread_setaffinity_np(pthread_self(), sizeof(want), &want);
}

int topology_bind_memory(const struct topology *t, int shard, void *addr,
			 size_t len)
{
	int node = topology_shard_node(t, shard);
	if (node < 0 || node >= NODE_MASK_BITS)
		return -EINVAL;
	unsigned long mask[NODE_MASK_BITS / LONG_BITS] = {0};
	mask[(unsigned)node / LONG_BITS] |= 1ul << ((unsigned)node % LONG_BITS);
	/* maxnode counts one past the last bit the kernel reads. */
	if (mbind(addr, len, MPOL_BIND, mask, NODE_MASK_BITS + 1,
		  MPOL_MF_MOVE) < 0)
		return -errno;
	return 0;
}
