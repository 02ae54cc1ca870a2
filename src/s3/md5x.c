/* md5x.c - owns the lane-parallel MD5 (md5x.h): the AVX-512F kernel that
 * runs sixteen block readers (mdblocks.h) side by side, and the
 * one-at-a-time fallback through OpenSSL. */
#include "md5x.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "mdblocks.h"
#include "s3_checksum.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MD5X_X86 1
#endif

#ifdef MD5X_X86

#define T __attribute__((target("avx512f")))
#define ADD _mm512_add_epi32
#define K(t) _mm512_set1_epi32((int)(t))

/* a = b + ((a + fn(b, c, d) + w + t) <<< s) for all lanes. */
#define STEP(fn, a, b, c, d, w, t, s)                                        \
	a = ADD(b, _mm512_rol_epi32(                                         \
			   ADD(ADD(a, _mm512_ternarylogic_epi32(b, c, d, fn)), \
			       ADD(w, K(t))),                                \
			   s))
#define F 0xca /* (b & c) | (~b & d) */
#define G 0xe4 /* (b & d) | (c & ~d) */
#define H 0x96 /* b ^ c ^ d */
#define I 0x39 /* c ^ (b | ~d) */

/* Word k of every lane's block: a 16 x 16 transpose of 32-bit words. */
T static void transpose(const uint8_t *const p[16], __m512i w[16])
{
	__m512i r[16], t[16];
	for (int l = 0; l < 16; l++)
		r[l] = _mm512_loadu_si512((const void *)p[l]);
	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
	}
	/* r[4i + m]: in each 128-bit lane j, rows 4i..4i+3 of word 4j + m */
	for (int i = 0; i < 4; i++) {
		r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
		r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
		r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
		r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
	}
	for (int m = 0; m < 4; m++) {
		__m512i v0 = _mm512_shuffle_i32x4(r[m], r[4 + m], 0x44);
		__m512i v1 = _mm512_shuffle_i32x4(r[m], r[4 + m], 0xee);
		__m512i v2 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0x44);
		__m512i v3 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0xee);
		w[m] = _mm512_shuffle_i32x4(v0, v2, 0x88);
		w[4 + m] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
		w[8 + m] = _mm512_shuffle_i32x4(v1, v3, 0x88);
		w[12 + m] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
	}
}

T static void md5x16(struct md5x_body *bodies, unsigned n)
{
	static const _Alignas(64) uint8_t idle[64];
	struct mdblocks rd[16];
	for (unsigned l = 0; l < 16; l++) {
		if (l < n)
			mdblocks_init(&rd[l], bodies[l].pieces,
				      bodies[l].n_pieces, false);
		else
			mdblocks_none(&rd[l]);
	}
	__m512i A = K(0x67452301), B = K(0xefcdab89), C = K(0x98badcfe),
		D = K(0x10325476);
	for (;;) {
		const uint8_t *p[16];
		__mmask16 live = 0;
		for (unsigned l = 0; l < 16; l++) {
			p[l] = mdblocks_next(&rd[l]);
			if (p[l])
				live |= (__mmask16)(1u << l);
			else
				p[l] = idle;
		}
		if (!live)
			break;
		__m512i w[16];
		transpose(p, w);
		__m512i a = A, b = B, c = C, d = D;
		STEP(F, a, b, c, d, w[0], 0xd76aa478, 7);
		STEP(F, d, a, b, c, w[1], 0xe8c7b756, 12);
		STEP(F, c, d, a, b, w[2], 0x242070db, 17);
		STEP(F, b, c, d, a, w[3], 0xc1bdceee, 22);
		STEP(F, a, b, c, d, w[4], 0xf57c0faf, 7);
		STEP(F, d, a, b, c, w[5], 0x4787c62a, 12);
		STEP(F, c, d, a, b, w[6], 0xa8304613, 17);
		STEP(F, b, c, d, a, w[7], 0xfd469501, 22);
		STEP(F, a, b, c, d, w[8], 0x698098d8, 7);
		STEP(F, d, a, b, c, w[9], 0x8b44f7af, 12);
		STEP(F, c, d, a, b, w[10], 0xffff5bb1, 17);
		STEP(F, b, c, d, a, w[11], 0x895cd7be, 22);
		STEP(F, a, b, c, d, w[12], 0x6b901122, 7);
		STEP(F, d, a, b, c, w[13], 0xfd987193, 12);
		STEP(F, c, d, a, b, w[14], 0xa679438e, 17);
		STEP(F, b, c, d, a, w[15], 0x49b40821, 22);

		STEP(G, a, b, c, d, w[1], 0xf61e2562, 5);
		STEP(G, d, a, b, c, w[6], 0xc040b340, 9);
		STEP(G, c, d, a, b, w[11], 0x265e5a51, 14);
		STEP(G, b, c, d, a, w[0], 0xe9b6c7aa, 20);
		STEP(G, a, b, c, d, w[5], 0xd62f105d, 5);
		STEP(G, d, a, b, c, w[10], 0x02441453, 9);
		STEP(G, c, d, a, b, w[15], 0xd8a1e681, 14);
		STEP(G, b, c, d, a, w[4], 0xe7d3fbc8, 20);
		STEP(G, a, b, c, d, w[9], 0x21e1cde6, 5);
		STEP(G, d, a, b, c, w[14], 0xc33707d6, 9);
		STEP(G, c, d, a, b, w[3], 0xf4d50d87, 14);
		STEP(G, b, c, d, a, w[8], 0x455a14ed, 20);
		STEP(G, a, b, c, d, w[13], 0xa9e3e905, 5);
		STEP(G, d, a, b, c, w[2], 0xfcefa3f8, 9);
		STEP(G, c, d, a, b, w[7], 0x676f02d9, 14);
		STEP(G, b, c, d, a, w[12], 0x8d2a4c8a, 20);

		STEP(H, a, b, c, d, w[5], 0xfffa3942, 4);
		STEP(H, d, a, b, c, w[8], 0x8771f681, 11);
		STEP(H, c, d, a, b, w[11], 0x6d9d6122, 16);
		STEP(H, b, c, d, a, w[14], 0xfde5380c, 23);
		STEP(H, a, b, c, d, w[1], 0xa4beea44, 4);
		STEP(H, d, a, b, c, w[4], 0x4bdecfa9, 11);
		STEP(H, c, d, a, b, w[7], 0xf6bb4b60, 16);
		STEP(H, b, c, d, a, w[10], 0xbebfbc70, 23);
		STEP(H, a, b, c, d, w[13], 0x289b7ec6, 4);
		STEP(H, d, a, b, c, w[0], 0xeaa127fa, 11);
		STEP(H, c, d, a, b, w[3], 0xd4ef3085, 16);
		STEP(H, b, c, d, a, w[6], 0x04881d05, 23);
		STEP(H, a, b, c, d, w[9], 0xd9d4d039, 4);
		STEP(H, d, a, b, c, w[12], 0xe6db99e5, 11);
		STEP(H, c, d, a, b, w[15], 0x1fa27cf8, 16);
		STEP(H, b, c, d, a, w[2], 0xc4ac5665, 23);

		STEP(I, a, b, c, d, w[0], 0xf4292244, 6);
		STEP(I, d, a, b, c, w[7], 0x432aff97, 10);
		STEP(I, c, d, a, b, w[14], 0xab9423a7, 15);
		STEP(I, b, c, d, a, w[5], 0xfc93a039, 21);
		STEP(I, a, b, c, d, w[12], 0x655b59c3, 6);
		STEP(I, d, a, b, c, w[3], 0x8f0ccc92, 10);
		STEP(I, c, d, a, b, w[10], 0xffeff47d, 15);
		STEP(I, b, c, d, a, w[1], 0x85845dd1, 21);
		STEP(I, a, b, c, d, w[8], 0x6fa87e4f, 6);
		STEP(I, d, a, b, c, w[15], 0xfe2ce6e0, 10);
		STEP(I, c, d, a, b, w[6], 0xa3014314, 15);
		STEP(I, b, c, d, a, w[13], 0x4e0811a1, 21);
		STEP(I, a, b, c, d, w[4], 0xf7537e82, 6);
		STEP(I, d, a, b, c, w[11], 0xbd3af235, 10);
		STEP(I, c, d, a, b, w[2], 0x2ad7d2bb, 15);
		STEP(I, b, c, d, a, w[9], 0xeb86d391, 21);

		/* a lane whose body ended keeps its sums */
		A = _mm512_mask_add_epi32(A, live, A, a);
		B = _mm512_mask_add_epi32(B, live, B, b);
		C = _mm512_mask_add_epi32(C, live, C, c);
		D = _mm512_mask_add_epi32(D, live, D, d);
	}
	_Alignas(64) uint32_t s[4][16];
	_mm512_store_si512((void *)s[0], A);
	_mm512_store_si512((void *)s[1], B);
	_mm512_store_si512((void *)s[2], C);
	_mm512_store_si512((void *)s[3], D);
	for (unsigned l = 0; l < n; l++) {
		for (unsigned k = 0; k < 16; k++)
			bodies[l].md5[k] = (uint8_t)(s[k / 4][l] >> (8 * (k % 4)));
		bodies[l].ok = true;
	}
}

#endif /* MD5X_X86 */

static atomic_bool lanes_forced_off;
static bool lanes_usable;
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

/* Lanes only where the CPU has them and the crypto library hashes MD5
 * at all: a FIPS build that refuses it must refuse it here too. */
static void probe(void)
{
	unsigned char md5[16];
#ifdef MD5X_X86
	__builtin_cpu_init();
	lanes_usable = __builtin_cpu_supports("avx512f") &&
		       s3_md5("", 0, md5) == 0;
#else
	(void)md5;
	lanes_usable = false;
#endif
}

unsigned md5x_lanes(void)
{
	pthread_once(&probe_once, probe);
	return lanes_usable && !atomic_load(&lanes_forced_off) ? 16 : 1;
}

void md5x_use_lanes(bool on)
{
	atomic_store(&lanes_forced_off, !on);
}

/* Fewer bodies than this cost more side by side than one by one: the
 * lanes cost the same whether 2 or 16 are filled (perf/README). */
#define MD5X_MIN_LANES 3

void md5x(struct md5x_body *bodies, unsigned n)
{
	bool lanes = md5x_lanes() > 1;
	(void)lanes; /* none without x86 */
	while (n) {
		unsigned k = n < MD5X_MAX ? n : MD5X_MAX;
#ifdef MD5X_X86
		if (lanes && k >= MD5X_MIN_LANES) {
			md5x16(bodies, k);
			bodies += k;
			n -= k;
			continue;
		}
#endif
		bodies->ok = s3_md5_pieces(bodies->pieces, bodies->n_pieces,
					   bodies->md5) == 0;
		bodies++;
		n--;
	}
}
