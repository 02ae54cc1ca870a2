/* clock.h - the one clock: CLOCK_MONOTONIC in nanoseconds or milliseconds.
 *
 * Use: timers, retry deadlines, ages and durations in the daemon, the
 * tools, the benchmarks and the tests. Wall-clock time (log lines, S3
 * dates) is CLOCK_REALTIME and stays where it is used. */
#ifndef RC_CLOCK_H
#define RC_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t rc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t rc_now_ms(void)
{
	return rc_now_ns() / 1000000ull;
}

static inline double rc_now_s(void)
{
	return (double)rc_now_ns() / 1e9;
}

#endif
