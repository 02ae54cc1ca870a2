/* cuda_visible.c - owns the mapping from a process's CUDA ordinal to the
 * machine's GPU index (see cuda_visible.h for the rules), and the order
 * of PCI addresses both it and topology.c number GPUs by. */
#include "cuda_visible.h"

#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVIDIA_GPUS_DIR "proc/driver/nvidia/gpus"
#define MAX_GPUS 64
#define PCI_LEN 32
#define UUID_LEN 96

__attribute__((format(printf, 3, 4)))
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (err && errlen)
		vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

struct nvidia_gpu {
	char pci[PCI_LEN];
	char uuid[UUID_LEN]; /* "GPU-..." or "" if the file did not say */
};

int pci_addr_cmp(const char *a, const char *b)
{
	unsigned v[2][4] = {{0}};
	sscanf(a, "%x:%x:%x.%x", &v[0][0], &v[0][1], &v[0][2], &v[0][3]);
	sscanf(b, "%x:%x:%x.%x", &v[1][0], &v[1][1], &v[1][2], &v[1][3]);
	for (int i = 0; i < 4; i++)
		if (v[0][i] != v[1][i])
			return v[0][i] < v[1][i] ? -1 : 1;
	return 0;
}

static int cmp_gpu(const void *a, const void *b)
{
	return pci_addr_cmp(((const struct nvidia_gpu *)a)->pci,
			    ((const struct nvidia_gpu *)b)->pci);
}

static void read_uuid(const char *path, char *uuid)
{
	uuid[0] = 0;
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	char line[256];
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "GPU UUID:", 9) != 0)
			continue;
		const char *p = line + 9;
		while (*p == ' ' || *p == '\t')
			p++;
		size_t n = strcspn(p, " \t\r\n");
		if (n < UUID_LEN)
			snprintf(uuid, UUID_LEN, "%.*s", (int)n, p);
		break;
	}
	fclose(f);
}

/* The GPUs the NVIDIA driver drives, in PCI address order. */
static int list_gpus(const char *root, struct nvidia_gpu *out)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/" NVIDIA_GPUS_DIR, root);
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while (n < MAX_GPUS && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (e->d_name[0] == '.' || len >= PCI_LEN)
			continue;
		char path[PATH_MAX + 64];
		/* memcpy: gcc -O0 cannot see the bound above, and snprintf
		 * there fails -Werror=format-truncation (the ASan build). */
		memcpy(out[n].pci, e->d_name, len + 1);
		snprintf(path, sizeof(path), "%s/%s/information", dir,
			 out[n].pci);
		read_uuid(path, out[n].uuid);
		n++;
	}
	closedir(d);
	qsort(out, (size_t)n, sizeof(*out), cmp_gpu);
	return n;
}

/* The index of the one GPU whose UUID starts with prefix ("GPU-..."),
 * or -1 (none, or more than one). */
static int uuid_index(const char *root, const char *prefix, size_t len)
{
	struct nvidia_gpu gpus[MAX_GPUS];
	int n = list_gpus(root, gpus), found = -1;
	for (int i = 0; i < n; i++) {
		if (strlen(gpus[i].uuid) < len ||
		    strncasecmp(gpus[i].uuid, prefix, len) != 0)
			continue;
		if (found >= 0)
			return -1; /* ambiguous: CUDA refuses it too */
		found = i;
	}
	return found;
}

/* The GPU index of one entry of the list, or -1 if it is not valid. */
static int entry_index(const char *root, const char *s, size_t len)
{
	if (len > 0 && len <= 4 && strspn(s, "0123456789") == len)
		return atoi(s) < MAX_GPUS ? atoi(s) : -1;
	if (len > 8 && strncasecmp(s, "MIG-GPU-", 8) == 0) {
		size_t uuid_len = 4;
		while (uuid_len < len - 4 && s[4 + uuid_len] != '/')
			uuid_len++;
		return uuid_index(root, s + 4, uuid_len);
	}
	if (len > 4 && strncasecmp(s, "GPU-", 4) == 0)
		return uuid_index(root, s, len);
	return -1;
}

int cuda_visible_gpu_index(const char *root, const char *visible,
			   int ordinal, char *err, size_t errlen)
{
	if (ordinal < 0)
		return fail(err, errlen, "no GPU named");
	if (!visible)
		return ordinal;
	const char *p = visible;
	for (int i = 0;; i++) {
		while (isspace((unsigned char)*p))
			p++;
		size_t len = strcspn(p, ",");
		size_t trimmed = len;
		while (trimmed && isspace((unsigned char)p[trimmed - 1]))
			trimmed--;
		int index = trimmed ? entry_index(root, p, trimmed) : -1;
		if (index < 0)
			return fail(err, errlen,
				    "CUDA_VISIBLE_DEVICES=%s: cuda:%d is not "
				    "visible (entry %d, \"%.*s\", is not a "
				    "GPU index or the UUID of a GPU of this "
				    "machine)", visible, ordinal, i,
				    (int)trimmed, p);
		if (i == ordinal)
			return index;
		if (!p[len])
			return fail(err, errlen,
				    "CUDA_VISIBLE_DEVICES=%s: cuda:%d is not "
				    "visible (%d GPUs are)", visible,
				    ordinal, i + 1);
		p += len + 1;
	}
}
