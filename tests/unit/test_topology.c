/* test_topology.c - unit tests of src/engine/topology.c: a fake sysfs tree of a
 * 2-node, 8-GPU machine (built under a temp dir), the text description and
 * its errors, overrides, shard placement, and the real thread pinning and
 * mbind paths on this machine's own node(s); and of src/common/cuda_visible.c,
 * the CUDA ordinal a client names mapped to that machine's GPU under
 * CUDA_VISIBLE_DEVICES (indexes and UUIDs, from the same fake tree). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <numaif.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_visible.h"
#include "topology.h"

#define MiB (1024ul * 1024ul)
#define PAGE 4096ul
#define LONG_BITS (8 * sizeof(unsigned long))

static const char *const HGX_DESCRIPTION =
	"# a 2-socket, 8-GPU machine\n"
	"node 0 cpus 0-7,16-23 mem 64G\n"
	"node 1 cpus 8-15,24-31 mem 64G\n"
	"gpu 0 node 0\ngpu 1 node 0\ngpu 2 node 0\ngpu 3 node 0\n"
	"gpu 4 node 1\ngpu 5 node 1\ngpu 6 node 1\n"
	"gpu 7 node 1 pci 0000:db:00.0   # last one\n";

/* ---- a fake sysfs tree ------------------------------------------------ */

static char fake_root[64];

static void write_file(const char *rel, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", fake_root, rel);
	/* mkdir -p of the parent */
	for (char *p = path + strlen(fake_root) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		cr_assert(mkdir(path, 0755) == 0 || errno == EEXIST, "%s", path);
		*p = '/';
	}
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f, "%s", path);
	fputs(text, f);
	fclose(f);
}

static void fake_node(int id, const char *cpulist, unsigned long kb)
{
	char rel[128], text[256];
	snprintf(rel, sizeof(rel), "sys/devices/system/node/node%d/cpulist", id);
	write_file(rel, cpulist);
	snprintf(rel, sizeof(rel), "sys/devices/system/node/node%d/meminfo", id);
	snprintf(text, sizeof(text),
		 "Node %d MemTotal:       %lu kB\nNode %d MemFree: 1 kB\n", id,
		 kb, id);
	write_file(rel, text);
}

static void fake_pci(const char *addr, const char *cls, const char *vendor,
		     const char *numa_node)
{
	static const char *const attrs[] = {"class", "vendor", "numa_node"};
	const char *vals[] = {cls, vendor, numa_node};
	for (int i = 0; i < 3; i++) {
		char rel[128];
		snprintf(rel, sizeof(rel), "sys/bus/pci/devices/%s/%s", addr,
			 attrs[i]);
		write_file(rel, vals[i]);
	}
}

/* An HGX-like box: GPUs created out of PCI order, one GPU whose firmware
 * gives no node, a NIC and the BMC's VGA (not CUDA devices). */
static void make_fake_hgx(void)
{
	snprintf(fake_root, sizeof(fake_root), "/tmp/rc-topo-XXXXXX");
	cr_assert_not_null(mkdtemp(fake_root));
	fake_node(0, "0-7,16-23\n", 64ul << 20);
	fake_node(1, "8-15,24-31\n", 64ul << 20);
	write_file("sys/devices/system/node/possible", "0-1\n");
	write_file("sys/devices/system/node/power/async", "disabled\n");
	static const char *const gpus[8][2] = {
		{"0000:db:00.0", "1"}, {"0000:5d:00.0", "0"},
		{"0000:9a:00.0", "1"}, {"0000:18:00.0", "-1"},
		{"0000:ab:00.0", "1"}, {"0000:2a:00.0", "0"},
		{"0000:ba:00.0", "1"}, {"0000:3a:00.0", "0"},
	};
	for (int i = 0; i < 8; i++) {
		fake_pci(gpus[i][0], i % 2 ? "0x030200\n" : "0x030000\n",
			 "0x10de\n", gpus[i][1]);
		char rel[128], info[256];
		snprintf(rel, sizeof(rel),
			 "proc/driver/nvidia/gpus/%s/information", gpus[i][0]);
		snprintf(info, sizeof(info),
			 "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 10\n"
			 "GPU UUID: \t GPU-c0ffee%.2s-0000-1111-2222-333344445555\n"
			 "Bus Location: \t %s\n", gpus[i][0] + 5, gpus[i][0]);
		write_file(rel, info);
	}
	fake_pci("0000:0c:00.0", "0x020000\n", "0x15b3\n", "0\n"); /* NIC */
	fake_pci("0000:03:00.0", "0x030000\n", "0x1a03\n", "-1\n"); /* BMC */
}

static int remove_entry(const char *path, const struct stat *st, int flag,
			struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void remove_fake_root(void)
{
	if (fake_root[0])
		nftw(fake_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void cpuset_from(const char *list, cpu_set_t *out)
{
	cr_assert_eq(topology_parse_cpulist(list, out), 0, "%s", list);
}

static void assert_shard_cpus(const struct topology *t, int shard,
			      const char *list)
{
	cpu_set_t got, want;
	cpuset_from(list, &want);
	cr_assert_eq(topology_shard_cpus(t, shard, &got), 0);
	cr_assert(CPU_EQUAL(&got, &want), "shard %d cpus are not %s", shard,
		  list);
}

static void assert_hgx_placement(const struct topology *t)
{
	cr_assert_eq(topology_shard_count(t), 2);
	for (int g = 0; g < 8; g++) {
		bool fell_back = true;
		cr_assert_eq(topology_shard_for(t, g, -1, &fell_back), g / 4,
			     "gpu %d", g);
		cr_assert_not(fell_back, "gpu %d", g);
		/* The GPU wins over a contradicting hint. */
		cr_assert_eq(topology_shard_for(t, g, 1 - g / 4, NULL), g / 4);
	}
	assert_shard_cpus(t, 0, "0-7,16-23");
	assert_shard_cpus(t, 1, "8-15,24-31");
	cr_assert_eq(topology_shard_node(t, 1), 1);
}

/* ---- CUDA_VISIBLE_DEVICES ---------------------------------------------- */

/* The machine's GPU of cuda:ordinal under visible, on the fake HGX. */
static int visible_gpu(const char *visible, int ordinal)
{
	char err[256] = "";
	int g = cuda_visible_gpu_index(fake_root, visible, ordinal, err,
				       sizeof(err));
	cr_assert(g >= 0 || err[0], "%s cuda:%d: -1 without a reason",
		  visible, ordinal);
	return g;
}

Test(cuda_visible, indexes_place_ranks_on_the_gpus_socket,
     .fini = remove_fake_root)
{
	make_fake_hgx();
	struct topology t;
	char err[256];
	cr_assert_eq(topology_from_sysfs(&t, fake_root, err, sizeof(err)), 0,
		     "%s", err);
	/* A job given physical GPUs 4-7 uses them as cuda:0-3: all of them
	 * on socket 1, where ordinals taken as indexes would say socket 0. */
	for (int rank = 0; rank < 4; rank++) {
		int g = visible_gpu("4,5,6,7", rank);
		cr_assert_eq(g, 4 + rank, "cuda:%d", rank);
		cr_assert_eq(topology_shard_for(&t, g, -1, NULL), 1,
			     "cuda:%d", rank);
	}
	cr_assert_eq(visible_gpu(NULL, 3), 3, "unset: the ordinal is the index");
	cr_assert_eq(visible_gpu(" 6 , 2", 1), 2, "blanks around entries");
	cr_assert_eq(visible_gpu("4,5,6,7", 4), -1, "only 4 visible");
	cr_assert_eq(visible_gpu("-1", 0), -1, "-1 hides every GPU");
	cr_assert_eq(visible_gpu("", 0), -1, "empty hides every GPU");
	/* CUDA stops at the first entry that is not valid. */
	cr_assert_eq(visible_gpu("5,x,6", 0), 5);
	cr_assert_eq(visible_gpu("5,x,6", 2), -1, "hidden behind x");
	cr_assert_eq(visible_gpu("5,99999,6", 2), -1, "hidden behind 99999");
}

Test(cuda_visible, uuids_map_through_the_driver, .fini = remove_fake_root)
{
	make_fake_hgx();
	/* PCI order: 18 2a 3a 5d 9a ab ba db = GPUs 0-7. */
	const char *full = "GPU-c0ffeeab-0000-1111-2222-333344445555,"
			   "GPU-c0ffeeba-0000-1111-2222-333344445555,"
			   "gpu-C0FFEEDB-0000-1111-2222-333344445555,"
			   "GPU-c0ffee9a-0000-1111-2222-333344445555";
	const int want[4] = {5, 6, 7, 4};
	for (int rank = 0; rank < 4; rank++)
		cr_assert_eq(visible_gpu(full, rank), want[rank], "cuda:%d",
			     rank);
	cr_assert_eq(visible_gpu("GPU-c0ffee3a,GPU-c0ffee18", 1), 0,
		     "a unique prefix is enough");
	cr_assert_eq(visible_gpu("GPU-c0ffee3a,GPU-c0ffee", 1), -1,
		     "an ambiguous prefix is not valid");
	cr_assert_eq(visible_gpu("MIG-GPU-c0ffee5d-0000-1111-2222-"
				 "333344445555/1/0", 0), 3,
		     "a legacy MIG name maps to its parent GPU");
	cr_assert_eq(visible_gpu("MIG-4d7f0a3c-8b1e-5f2a-9c6d-0e1f2a3b4c5d",
				 0), -1, "a MIG instance UUID does not map");
	cr_assert_eq(visible_gpu("GPU-deadbeef", 0), -1, "no such GPU");
	char err[256];
	cr_assert_eq(cuda_visible_gpu_index(fake_root, "GPU-deadbeef", 0, err,
					    sizeof(err)), -1);
	cr_assert(strstr(err, "GPU-deadbeef"), "the entry is named: %s", err);
}

/* ---- fake sysfs ------------------------------------------------------- */

Test(topology, fake_sysfs_two_nodes_eight_gpus, .fini = remove_fake_root)
{
	make_fake_hgx();
	struct topology t;
	char err[256] = "";
	cr_assert_eq(topology_from_sysfs(&t, fake_root, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(t.n_nodes, 2);
	cr_assert_eq(t.n_gpus, 8, "NIC or BMC VGA counted as GPUs");
	cr_assert_eq(t.nodes[1].mem_bytes, 64ull << 30);
	static const char *const order[8] = {
		"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
		"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0",
	};
	for (int g = 0; g < 8; g++) {
		cr_assert_str_eq(t.gpus[g].pci, order[g], "gpu %d", g);
		cr_assert_eq(t.gpus[g].node, g / 4, "gpu %d (%s)", g, order[g]);
	}
	assert_hgx_placement(&t);
}

Test(topology, fake_sysfs_without_numa_is_one_node, .fini = remove_fake_root)
{
	snprintf(fake_root, sizeof(fake_root), "/tmp/rc-topo-XXXXXX");
	cr_assert_not_null(mkdtemp(fake_root));
	write_file("sys/devices/system/cpu/online", "0-3\n");
	write_file("proc/meminfo", "MemTotal:       1024 kB\n");
	struct topology t;
	char err[256] = "";
	cr_assert_eq(topology_from_sysfs(&t, fake_root, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(t.n_nodes, 1);
	cr_assert_eq(t.n_gpus, 0);
	cr_assert_eq(t.nodes[0].mem_bytes, 1024 * 1024);
	assert_shard_cpus(&t, 0, "0-3");
}

Test(topology, fake_sysfs_bad_cpulist_names_the_file,
     .fini = remove_fake_root)
{
	make_fake_hgx();
	fake_node(1, "8-x\n", 1024);
	struct topology t;
	char err[256] = "";
	cr_assert_eq(topology_from_sysfs(&t, fake_root, err, sizeof(err)), -1);
	cr_assert(strstr(err, "node1/cpulist"), "%s", err);
}

/* ---- the real machine ------------------------------------------------- */

/* With the NVIDIA driver loaded, /proc/driver/nvidia/gpus lists every
 * GPU by PCI address: an independent count to check sysfs against. */
static int nvidia_driver_gpu_count(void)
{
	DIR *d = opendir("/proc/driver/nvidia/gpus");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

Test(topology, real_sysfs_parses)
{
	struct topology t;
	char err[256] = "";
	cr_assert_eq(topology_from_sysfs(&t, "/", err, sizeof(err)), 0, "%s",
		     err);
	cr_assert_geq(t.n_nodes, 1);
	cr_assert_geq(topology_shard_count(&t), 1);
	cpu_set_t mine, all;
	CPU_ZERO(&all);
	for (int i = 0; i < t.n_nodes; i++)
		CPU_OR(&all, &all, &t.nodes[i].cpus);
	cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
	CPU_AND(&mine, &mine, &all);
	cr_assert_gt(CPU_COUNT(&mine), 0, "no node holds a CPU we may use");
	int driver = nvidia_driver_gpu_count();
	if (driver >= 0)
		cr_assert_eq(t.n_gpus, driver);
	for (int g = 0; g < t.n_gpus; g++) {
		bool fell_back;
		topology_shard_for(&t, g, -1, &fell_back);
		cr_assert_not(fell_back, "gpu %d (%s) on node %d", g,
			      t.gpus[g].pci, t.gpus[g].node);
	}
	fprintf(stderr, "real sysfs: %d node(s), %d shard(s), %d GPU(s)\n",
		t.n_nodes, t.n_shards, t.n_gpus);
}

/* ---- description, overrides, placement -------------------------------- */

Test(topology, description_two_nodes_eight_gpus)
{
	struct topology t;
	char err[256] = "";
	cr_assert_eq(topology_from_description(&t, HGX_DESCRIPTION, err,
					       sizeof(err)), 0, "%s", err);
	cr_assert_eq(t.n_nodes, 2);
	cr_assert_eq(t.n_gpus, 8);
	cr_assert_str_eq(t.gpus[7].pci, "0000:db:00.0");
	cr_assert_eq(t.nodes[0].mem_bytes, 64ull << 30);
	assert_hgx_placement(&t);
}

Test(topology, override_moves_a_gpu)
{
	struct topology t;
	cr_assert_eq(topology_from_description(&t, HGX_DESCRIPTION, NULL, 0), 0);
	cr_assert_eq(topology_override_gpu(&t, 1, 1), 0);
	cr_assert_eq(topology_override_gpu(&t, 6, 0), 0);
	cr_assert_eq(topology_shard_for(&t, 1, -1, NULL), 1);
	cr_assert_eq(topology_shard_for(&t, 6, -1, NULL), 0);
	cr_assert_eq(topology_shard_for(&t, 0, -1, NULL), 0, "gpu 0 moved too");
	cr_assert_eq(topology_override_gpu(&t, 8, 0), -EINVAL);
	cr_assert_eq(topology_override_gpu(&t, 0, 2), -EINVAL);
	cr_assert_eq(topology_override_gpu(&t, -1, 0), -EINVAL);
}

Test(topology, placement_without_a_known_gpu)
{
	struct topology t;
	cr_assert_eq(topology_from_description(&t, HGX_DESCRIPTION, NULL, 0), 0);
	bool fell_back = true;
	/* Nothing named: shard 0, nothing to warn about. */
	cr_assert_eq(topology_shard_for(&t, -1, -1, &fell_back), 0);
	cr_assert_not(fell_back);
	/* A hint alone, or with a GPU this machine does not have. */
	cr_assert_eq(topology_shard_for(&t, -1, 1, &fell_back), 1);
	cr_assert_not(fell_back);
	cr_assert_eq(topology_shard_for(&t, 12, 1, &fell_back), 1);
	cr_assert_not(fell_back);
	/* Out of range: shard 0, flagged. */
	cr_assert_eq(topology_shard_for(&t, 12, -1, &fell_back), 0);
	cr_assert(fell_back);
	cr_assert_eq(topology_shard_for(&t, -1, 7, &fell_back), 0);
	cr_assert(fell_back);
	cr_assert_eq(topology_shard_cpus(&t, 2, &(cpu_set_t){0}), -EINVAL);
	cr_assert_eq(topology_shard_node(&t, -1), -1);
}

Test(topology, node_without_cpus_gets_no_shard)
{
	/* Grace Hopper style: node 1 is the GPU's memory, no CPUs. */
	struct topology t;
	char err[256] = "";
	cr_assert_eq(topology_from_description(&t,
		"node 1 mem 96G\nnode 0 cpus 0-71 mem 480G\ngpu 0 node 1\n",
		err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(topology_shard_count(&t), 1);
	cr_assert_eq(topology_shard_node(&t, 0), 0);
	bool fell_back;
	cr_assert_eq(topology_shard_for(&t, 0, 0, &fell_back), 0);
	cr_assert_not(fell_back, "the hint's node serves it");
	cr_assert_eq(topology_shard_for(&t, 0, -1, &fell_back), 0);
	cr_assert(fell_back);
}

Test(topology, description_errors_name_the_line)
{
	static const char *const cases[][2] = {
		{"node 0 cpus 0-3 mem 1G\nnod 1\n", "line 2: expected node or gpu, not 'nod'"},
		{"node 0 cpus 0-3- mem 1G\n", "line 1: bad cpu list '0-3-'"},
		{"node 0 cpus 3-1 mem 1G\n", "line 1: bad cpu list '3-1'"},
		{"node 0 cpus 0-3 mem 1Q\n", "line 1: bad size (e.g. 64G) '1Q'"},
		{"node 0 cpus 0-3 mem\n", "line 1: no value after 'mem'"},
		{"node 0 cpu 0-3\n", "line 1: expected cpus or mem, not 'cpu'"},
		{"node x\n", "line 1: node needs an id from 0 to 1023, not 'x'"},
		{"node 0 mem 1G\n\n# c\nnode 0 mem 1G\n", "line 4: node declared twice: '0'"},
		{"node 0 cpus 0 mem 1G\ngpu 0 node 1\n", "line 2: gpu on an undeclared node '1'"},
		{"node 0 cpus 0 mem 1G\ngpu 0 nod 0\n", "line 2: expected 'node ID' after the gpu index"},
		{"node 0 cpus 0 mem 1G\ngpu 0 node 0\ngpu 0 node 0\n", "line 3: gpu declared twice: '0'"},
		{"node 0 cpus 0 mem 1G\ngpu 64 node 0\n", "line 2: gpu needs an index from 0 to 63, not '64'"},
		{"node 0 cpus 0 mem 1G\ngpu 0 node 0 pci\n", "line 2: bad pci address"},
		{"node 0 cpus 0 mem 1G\ngpu 0 node 0 fast\n", "line 2: unexpected 'fast'"},
		{"node 0 cpus 0 mem 1G\ngpu 0 node 0\ngpu 2 node 0\n", "gpu 1 is not described (GPUs are numbered 0..2)"},
		{"node 0 cpus 0-3\n", "no NUMA node has both CPUs and memory"},
		{"", "no NUMA node has both CPUs and memory"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct topology t;
		char err[256] = "";
		cr_assert_eq(topology_from_description(&t, cases[i][0], err,
						       sizeof(err)), -1,
			     "accepted: %s", cases[i][0]);
		cr_assert_str_eq(err, cases[i][1], "for: %s", cases[i][0]);
	}
}

Test(topology, cpulist_parser)
{
	cpu_set_t s;
	cpuset_from("0-7,16-23\n", &s);
	cr_assert_eq(CPU_COUNT(&s), 16);
	cr_assert(CPU_ISSET(16, &s) && !CPU_ISSET(8, &s));
	cpuset_from("\n", &s); /* a node without CPUs */
	cr_assert_eq(CPU_COUNT(&s), 0);
	cpuset_from("5", &s);
	cr_assert(CPU_COUNT(&s) == 1 && CPU_ISSET(5, &s));
	static const char *const bad[] = {"a", "1,", ",1", "1-", "-1", "1 2",
					  "0-1024", "2-1"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(topology_parse_cpulist(bad[i], &s), -1, "%s",
			     bad[i]);
}

/* ---- binding on this machine ------------------------------------------ */

struct bind_result {
	const struct topology *t;
	int rc;
	cpu_set_t after;
};

static void *bind_in_thread(void *arg)
{
	struct bind_result *r = arg;
	r->rc = topology_bind_thread(r->t, 0);
	sched_getaffinity(0, sizeof(r->after), &r->after);
	return NULL;
}

Test(topology, bind_thread_pins_only_the_caller)
{
	struct topology t;
	cr_assert_eq(topology_from_sysfs(&t, "/", NULL, 0), 0);
	cpu_set_t before, want, main_after;
	cr_assert_eq(sched_getaffinity(0, sizeof(before), &before), 0);
	cr_assert_eq(topology_shard_cpus(&t, 0, &want), 0);
	CPU_AND(&want, &want, &before);
	struct bind_result r = {.t = &t};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, bind_in_thread, &r), 0);
	pthread_join(th, NULL);
	cr_assert_eq(r.rc, 0, "%s", strerror(-r.rc));
	cr_assert(CPU_EQUAL(&r.after, &want), "thread not pinned to shard 0");
	cr_assert_eq(sched_getaffinity(0, sizeof(main_after), &main_after), 0);
	cr_assert(CPU_EQUAL(&main_after, &before), "main thread moved");
}

/* Binds a mapping to shard 0's node, touches it, and checks the policy
 * and the node of every MiB. */
static void check_bound_to_shard0(const struct topology *t, char *p,
				  size_t len)
{
	int node0 = topology_shard_node(t, 0);
	cr_assert_eq(topology_bind_memory(t, 0, p, len), 0);
	memset(p, 0xa5, len);
	int mode = -1;
	unsigned long mask[1024 / LONG_BITS] = {0};
	cr_assert_eq(get_mempolicy(&mode, mask, 1025, p, MPOL_F_ADDR), 0,
		     "%s", strerror(errno));
	cr_assert_eq(mode, MPOL_BIND);
	for (int n = 0; n < 1024; n++) {
		bool set = mask[n / LONG_BITS] >> (n % LONG_BITS) & 1;
		cr_assert_eq(set, n == node0, "node %d in the mask", n);
	}
	for (size_t off = 0; off < len; off += MiB) {
		int node = -1;
		cr_assert_eq(get_mempolicy(&node, NULL, 0, p + off,
					   MPOL_F_NODE | MPOL_F_ADDR), 0);
		cr_assert_eq(node, node0, "page at +%zu MiB on node %d",
			     off / MiB, node);
	}
}

Test(topology, bind_memory_anonymous)
{
	struct topology t;
	cr_assert_eq(topology_from_sysfs(&t, "/", NULL, 0), 0);
	size_t len = 64 * MiB;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(p, MAP_FAILED);
	check_bound_to_shard0(&t, p, len);
	munmap(p, len);
}

Test(topology, bind_memory_memfd_like_an_arena)
{
	struct topology t;
	cr_assert_eq(topology_from_sysfs(&t, "/", NULL, 0), 0);
	size_t len = 64 * MiB;
	int fd = memfd_create("rc-topo-test", MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)len), 0);
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(p, MAP_FAILED);
	check_bound_to_shard0(&t, p, len);
	munmap(p, len);
	close(fd);
}

Test(topology, bind_rejects_unknown_shard)
{
	struct topology t;
	cr_assert_eq(topology_from_sysfs(&t, "/", NULL, 0), 0);
	char *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(p, MAP_FAILED);
	cr_assert_eq(topology_bind_memory(&t, t.n_shards, p, PAGE), -EINVAL);
	cr_assert_eq(topology_bind_thread(&t, -1), -EINVAL);
	munmap(p, PAGE);
}
