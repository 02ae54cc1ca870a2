/* crc32c.h - CRC-32C (Castagnoli), the checksum of the NVMe tier's blocks
 * and index records. SSE4.2 when the CPU has it, a slicing-by-8 table
 * otherwise; both give the same values. */
#ifndef RC_CRC32C_H
#define RC_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over buf. crc32c(0, "123456789", 9) ==
 * 0xe3069283. Chaining: crc32c(crc32c(0, a, n), b, m) == crc of a||b. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

/* The portable table version, exposed so tests compare both paths. */
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len);

#endif
