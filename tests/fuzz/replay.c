/* replay.c - runs a fuzz target over every file of its seed corpus
 * without libFuzzer, so the plain and sanitizer builds (gcc) keep every
 * seed and every crash input ever found as a regression test. One TAP
 * line per file; a crash or a broken FUZZ_CHECK aborts the run, which
 * meson reports as failed.
 *
 * usage: fuzz_replay_TARGET CORPUS_DIR [--tap=FILE] */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	struct stat st;
	uint8_t *buf = NULL;
	if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
		/* One byte more: malloc(0) may give NULL. */
		buf = malloc((size_t)st.st_size + 1);
		if (buf && fread(buf, 1, (size_t)st.st_size, f) !=
			       (size_t)st.st_size) {
			free(buf);
			buf = NULL;
		}
		*len = (size_t)st.st_size;
	}
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *tap_path = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--tap=", 6))
			tap_path = argv[i] + 6;
		else
			dir = argv[i];
	}
	if (!dir) {
		fprintf(stderr, "usage: %s CORPUS_DIR [--tap=FILE]\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	struct dirent **ents;
	int n = scandir(dir, &ents, NULL, by_name);
	if (n < 0) {
		fprintf(stderr, "%s: %s\n", dir, strerror(errno));
		return 1;
	}
	FILE *tap = tap_path ? fopen(tap_path, "w") : stdout;
	if (!tap) {
		fprintf(stderr, "%s: %s\n", tap_path, strerror(errno));
		return 1;
	}
	setvbuf(tap, NULL, _IOLBF, 0); /* lines written survive an abort */
	int files = 0, bad = 0;
	for (int i = 0; i < n; i++) {
		char path[4096];
		size_t len = 0;
		if (ents[i]->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, ents[i]->d_name);
		uint8_t *buf = slurp(path, &len);
		files++;
		if (!buf) {
			fprintf(tap, "not ok %d - %s: cannot read it\n", files,
				ents[i]->d_name);
			bad++;
			continue;
		}
		LLVMFuzzerTestOneInput(buf, len);
		free(buf);
		fprintf(tap, "ok %d - %s\n", files, ents[i]->d_name);
	}
	fprintf(tap, "1..%d\n", files);
	if (files == 0) {
		fprintf(stderr, "%s: an empty corpus tests nothing\n", dir);
		bad++;
	}
	for (int i = 0; i < n; i++)
		free(ents[i]);
	free(ents);
	if (tap != stdout)
		fclose(tap);
	return bad ? 1 : 0;
}
