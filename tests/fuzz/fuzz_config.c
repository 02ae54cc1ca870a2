/* fuzz_config.c - the config parser (config.c): any bytes as a config
 * file. A config that loads must also free cleanly and describe datasets
 * whose ACL checks run. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "fuzz.h"
#include "log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	rc_log_level = -1; /* the parser's warnings are expected here */
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[64], err[512];
	struct rc_config cfg;
	int fd = fuzz_memfd(data, size, path, sizeof(path));
	if (fd < 0)
		return 0;
	if (config_load(path, &cfg, err, sizeof(err)) == 0) {
		gid_t groups[1] = {1000};
		for (size_t i = 0; i < cfg.n_datasets; i++) {
			const struct rc_dataset_config *ds = &cfg.datasets[i];
			FUZZ_CHECK(ds->name && ds->bucket && ds->prefix);
			config_dataset_allows(ds, 1000, 1000, groups, 1);
			config_dataset_allows_write(ds, 0, 0, NULL, 0);
			struct rc_dataset_config *c = config_dataset_dup(ds);
			if (c) {
				config_dataset_clear(c);
				free(c);
			}
		}
		config_free(&cfg);
	} else {
		/* Every refusal says why. */
		FUZZ_CHECK(err[0] != '\0');
	}
	close(fd);
	return 0;
}
