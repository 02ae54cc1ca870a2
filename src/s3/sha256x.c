/* sha256x.c - owns the interleaved SHA-256 (sha256x.h): the SHA-NI kernel
 * that runs two block readers (mdblocks.h) side by side, each lane taking
 * the next body when its own ends, and the one-at-a-time fallback through
 * OpenSSL. */
#include "sha256x.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "mdblocks.h"
#include "s3_checksum.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define SHA256X_X86 1
#endif

#ifdef SHA256X_X86

#define T __attribute__((target("sha,sse4.1,ssse3")))

static const _Alignas(16) uint32_t round_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static const uint32_t initial[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

/* SHA-NI keeps the state as ABEF and CDGH. */
struct lane {
	__m128i abef, cdgh;
};

T static struct lane lane_start(void)
{
	__m128i t = _mm_shuffle_epi32(
		_mm_loadu_si128((const __m128i *)&initial[0]), 0xb1); /* CDAB */
	__m128i u = _mm_shuffle_epi32(
		_mm_loadu_si128((const __m128i *)&initial[4]), 0x1b); /* EFGH */
	return (struct lane){_mm_alignr_epi8(t, u, 8),
			     _mm_blend_epi16(u, t, 0xf0)};
}

T static void lane_digest(struct lane s, unsigned char out[32])
{
	__m128i t = _mm_shuffle_epi32(s.abef, 0x1b); /* FEBA */
	__m128i u = _mm_shuffle_epi32(s.cdgh, 0xb1); /* DCHG */
	_Alignas(16) uint32_t h[8];
	_mm_store_si128((__m128i *)&h[0], _mm_blend_epi16(t, u, 0xf0));
	_mm_store_si128((__m128i *)&h[4], _mm_alignr_epi8(u, t, 8));
	for (unsigned i = 0; i < 8; i++)
		for (unsigned k = 0; k < 4; k++)
			out[4 * i + k] = (unsigned char)(h[i] >> (24 - 8 * k));
}

/* One block into each lane's state; the two chains interleave. */
T static void compress2(struct lane s[2], const uint8_t *const p[2])
{
	const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll,
					     0x0405060700010203ll);
	struct lane was[2] = {s[0], s[1]};
	__m128i w[2][4];
#pragma GCC unroll 16
	for (int g = 0; g < 16; g++) {
		__m128i k = _mm_load_si128((const __m128i *)&round_k[4 * g]);
#pragma GCC unroll 2
		for (int l = 0; l < 2; l++) {
			__m128i *m = w[l];
			if (g < 4)
				m[g] = _mm_shuffle_epi8(
					_mm_loadu_si128((const __m128i *)
								(p[l] + 16 * g)),
					bswap);
			else /* W[t..t+3] from W[t-16..t-1] */
				m[g & 3] = _mm_sha256msg2_epu32(
					_mm_add_epi32(
						_mm_sha256msg1_epu32(
							m[g & 3],
							m[(g + 1) & 3]),
						_mm_alignr_epi8(m[(g + 3) & 3],
								m[(g + 2) & 3],
								4)),
					m[(g + 3) & 3]);
			__m128i wk = _mm_add_epi32(m[g & 3], k);
			s[l].cdgh = _mm_sha256rnds2_epu32(s[l].cdgh, s[l].abef,
							  wk);
			s[l].abef = _mm_sha256rnds2_epu32(
				s[l].abef, s[l].cdgh,
				_mm_shuffle_epi32(wk, 0x0e));
		}
	}
	for (int l = 0; l < 2; l++) {
		s[l].abef = _mm_add_epi32(s[l].abef, was[l].abef);
		s[l].cdgh = _mm_add_epi32(s[l].cdgh, was[l].cdgh);
	}
}

T static void sha256_ni_x2(struct sha256x_body *bodies, unsigned n)
{
	static const _Alignas(64) uint8_t idle[64];
	struct mdblocks rd[2];
	struct lane s[2];
	unsigned body[2], next = 0;
	bool live[2] = {false, false};
	for (;;) {
		const uint8_t *p[2];
		for (unsigned l = 0; l < 2; l++) {
			p[l] = live[l] ? mdblocks_next(&rd[l]) : NULL;
			while (!p[l]) { /* ended or never began: the next body */
				if (live[l]) {
					lane_digest(s[l], bodies[body[l]].sha256);
					bodies[body[l]].ok = true;
				}
				live[l] = next < n;
				if (!live[l]) {
					p[l] = idle;
					break;
				}
				body[l] = next++;
				mdblocks_init(&rd[l], bodies[body[l]].pieces,
					      bodies[body[l]].n_pieces, true);
				s[l] = lane_start();
				p[l] = mdblocks_next(&rd[l]);
			}
		}
		if (!live[0] && !live[1])
			break;
		compress2(s, p); /* an idle lane's state is never read */
	}
}

#endif /* SHA256X_X86 */

static atomic_bool lanes_forced_off;
static bool lanes_usable;
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

static void probe(void)
{
#ifdef SHA256X_X86
	/* cpuid: not every compiler's __builtin_cpu_supports knows "sha" */
	unsigned a, b, c, d;
	bool sse41 = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_1);
	bool sha = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
	lanes_usable = sse41 && sha &&
		       !EVP_default_properties_is_fips_enabled(NULL);
#else
	lanes_usable = false;
#endif
}

unsigned sha256x_lanes(void)
{
	pthread_once(&probe_once, probe);
	return lanes_usable && !atomic_load(&lanes_forced_off) ? 2 : 1;
}

void sha256x_use_lanes(bool on)
{
	atomic_store(&lanes_forced_off, !on);
}

void sha256x(struct sha256x_body *bodies, unsigned n)
{
#ifdef SHA256X_X86
	if (n >= 2 && sha256x_lanes() > 1) {
		sha256_ni_x2(bodies, n);
		return;
	}
#endif
	for (unsigned i = 0; i < n; i++)
		bodies[i].ok = s3_sha256_pieces(bodies[i].pieces,
						bodies[i].n_pieces,
						bodies[i].sha256) == 0;
}
