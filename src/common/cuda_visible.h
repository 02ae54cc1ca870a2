/* cuda_visible.h - the GPU a CUDA process means, as the daemon numbers it.
 *
 * A client names its GPU by the CUDA ordinal it uses (cuda:N, the local
 * rank). The daemon numbers the machine's NVIDIA GPUs in PCI address
 * order (topology.h). The two differ whenever CUDA_VISIBLE_DEVICES is set,
 * as Slurm and Kubernetes do: with "4,5,6,7", cuda:0 is GPU 4. This maps
 * one to the other the way the CUDA runtime reads the variable: entries
 * are indexes or UUIDs ("GPU-<uuid>", a unique prefix is enough;
 * "MIG-GPU-<uuid>/gi/ci" names its parent GPU), and the first entry that
 * is not valid hides it and every entry after it.
 *
 * Index entries are taken in PCI order, which is CUDA's order under
 * CUDA_DEVICE_ORDER=PCI_BUS_ID and, on a machine of identical GPUs, under
 * the default FASTEST_FIRST too. UUIDs are found in the NVIDIA driver's
 * ROOT/proc/driver/nvidia/gpus/ADDR/information ("GPU UUID: ..."), one
 * folder per GPU it drives, named by PCI address: the rank of ADDR among
 * them is the index. MIG instance UUIDs ("MIG-<uuid>") are not listed
 * there and do not map.
 *
 * Plain functions over their arguments; no CUDA library is loaded (a
 * forked DataLoader worker must not initialise CUDA). */
#ifndef RC_CUDA_VISIBLE_H
#define RC_CUDA_VISIBLE_H

#include <stddef.h>

/* The machine's GPU index of CUDA ordinal `ordinal` (>= 0) in a process
 * whose CUDA_VISIBLE_DEVICES is `visible` (NULL: unset, the ordinal is the
 * index). root: "/" or a described tree for tests. Returns the index, or
 * -1 with the reason in err when the ordinal is not among the visible
 * GPUs or its entry does not map to one (an unknown UUID, a MIG
 * instance). */
int cuda_visible_gpu_index(const char *root, const char *visible,
			   int ordinal, char *err, size_t errlen);

/* Orders two PCI addresses ("DDDD:BB:DD.F") as numbers, as the kernel
 * and CUDA number devices: a domain can have five hex digits, so text
 * order is not enough. <0, 0 or >0. */
int pci_addr_cmp(const char *a, const char *b);

#endif
