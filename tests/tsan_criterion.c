/* tsan_criterion.c - lets Criterion start under ThreadSanitizer (linked
 * into the test executables of a -Db_sanitize=thread build only).
 *
 * Criterion's sandbox (boxfort) maps its inheritable arena at
 * 0x2000_0000_0000 + rand_r() * 16 MiB and gives up after 10 tries on
 * mapped pages; ThreadSanitizer reserves that whole range but
 * 0x5500_0000_0000-0x5680_0000_0000 (where PIE binaries load), so
 * Criterion aborts with "Could not initialize inheritable arena"
 * (Snaipe/Criterion#274). This rand_r, found before libc's, only picks
 * slots inside that window. Nothing in ringcache calls rand_r. */
#include <stdlib.h>

#define WINDOW_FIRST 0x350000u /* (0x5500_0000_0000 - 0x2000_0000_0000) >> 24 */
#define WINDOW_SLOTS 0x18000u  /* 1.5 TiB of 16 MiB slots */

int rand_r(unsigned int *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return (int)(WINDOW_FIRST + (*seed >> 8) % WINDOW_SLOTS);
}
