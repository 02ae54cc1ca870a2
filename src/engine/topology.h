/* topology.h - the machine's NUMA nodes and GPUs, and which shard serves
 * whom.
 *
 * One shard per NUMA node that has both memory and CPUs: its arena is
 * bound to the node's memory and its reactor thread to the node's CPUs.
 * (A node with memory but no CPU, such as a CXL expander or a Grace
 * Hopper's HBM, gets no shard: no thread could run there.) A client that
 * names GPU g is served by the shard of g's node.
 *
 * The topology source is an interface: read from sysfs (root "/" normally,
 * a fake tree in tests) or from a text description, so placement is tested
 * on a described 2-node, 8-GPU machine while this one has a single node.
 * GPUs are numbered in PCI address order, which is how CUDA numbers them
 * under CUDA_DEVICE_ORDER=PCI_BUS_ID.
 *
 * The struct is plain data filled in place: nothing to free.
 */
#ifndef RC_TOPOLOGY_H
#define RC_TOPOLOGY_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOPOLOGY_MAX_NODES 64
#define TOPOLOGY_MAX_GPUS 64
#define TOPOLOGY_PCI_LEN 32 /* "0000:17:00.0" with room for odd domains */

struct topology_node {
	int id;               /* the kernel's node number */
	cpu_set_t cpus;
	uint64_t mem_bytes;
	int shard;            /* index among shards, or -1: no CPU or memory */
};

struct topology_gpu {
	char pci[TOPOLOGY_PCI_LEN]; /* "" when described without one */
	int node;                   /* node id */
};

struct topology {
	int n_nodes;          /* sorted by id */
	int n_gpus;           /* gpus[i] is GPU i */
	int n_shards;
	struct topology_node nodes[TOPOLOGY_MAX_NODES];
	struct topology_gpu gpus[TOPOLOGY_MAX_GPUS];
};

/* Reads root/sys/devices/system/node/nodeN/{cpulist,meminfo} (without
 * them, a kernel built without NUMA: one node of all online CPUs) and the
 * GPUs in root/sys/bus/pci/devices/ADDR/: NVIDIA VGA or 3D controllers,
 * the only ones CUDA numbers, so a server's BMC VGA does not shift the
 * indexes. A numa_node of -1 (firmware did not say) means the first node.
 * Returns 0, or -1 with one line in err naming the file that is wrong. */
int topology_from_sysfs(struct topology *t, const char *root, char *err,
			size_t errlen);

/* Parses a described machine, one statement a line, '#' comments:
 *   node ID cpus LIST mem SIZE      e.g. "node 1 cpus 8-15,24-31 mem 64G"
 *   gpu INDEX node ID [pci ADDR]    nodes before the GPUs on them
 * GPU indexes must be 0..n-1, each once. Returns 0, or -1 with
 * "line N: what is wrong" in err. */
int topology_from_description(struct topology *t, const char *text,
			      char *err, size_t errlen);

/* Moves GPU gpu to node (the config's gpu_numa = GPU:NODE,...). Returns 0,
 * or -EINVAL if either is unknown. */
int topology_override_gpu(struct topology *t, int gpu, int node);

int topology_shard_count(const struct topology *t);

/* The shard serving a client that names gpu (or -1) and numa_node_hint
 * (or -1): the GPU's node's shard; for a GPU not in the topology, the
 * hint's node's shard; else shard 0. *fell_back (may be NULL) is set when
 * something the client named could not be honoured: a GPU or node that
 * does not exist or has no shard, so the caller can warn. */
int topology_shard_for(const struct topology *t, int gpu, int numa_node_hint,
		       bool *fell_back);

/* The node id of a shard, or -1 if shard is out of range. */
int topology_shard_node(const struct topology *t, int shard);

/* The CPUs of a shard's node. Returns 0 or -EINVAL. */
int topology_shard_cpus(const struct topology *t, int shard, cpu_set_t *out);

/* Pins the calling thread to the shard's CPUs. Returns 0 or -errno. */
int topology_bind_thread(const struct topology *t, int shard);

/* Binds [addr, addr+len) to the shard's node (mbind MPOL_BIND, moving pages
 * already there), anonymous or memfd mappings alike. addr must be
 * page-aligned. Returns 0 or -errno. */
int topology_bind_memory(const struct topology *t, int shard, void *addr,
			 size_t len);

/* Parses a kernel cpu list ("0-7,16-23", "" is empty). Returns 0 or -1. */
int topology_parse_cpulist(const char *s, cpu_set_t *out);

#endif
