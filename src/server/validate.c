/* validate.c - owns the rules a client-written submission entry, key,
 * buffer range, table id and ring index must follow (validate.h). Pure
 * functions: session_ring.c applies them to its private copies. */
#include "validate.h"

#include <errno.h>
#include <string.h>

/* Which SQE fields an opcode reads; all others must be zero. */
enum {
	F_ARG = 1, F_HANDLE = 2, F_OFFSET = 4, F_LEN = 8, F_BUF = 16,
	F_DATASET = 32,
};
static const uint8_t op_fields[RC_OP__COUNT] = {
	[RC_OP_NOP] = 0,
	[RC_OP_OPEN] = F_DATASET | F_ARG,
	[RC_OP_STAT] = F_HANDLE | F_ARG,
	[RC_OP_LIST] = F_DATASET | F_ARG | F_OFFSET | F_BUF | F_LEN,
	[RC_OP_READ] = F_HANDLE | F_OFFSET | F_LEN,
	[RC_OP_READ_INTO] = F_HANDLE | F_OFFSET | F_LEN | F_BUF,
	[RC_OP_RELEASE] = F_HANDLE,
	[RC_OP_CLOSE] = F_HANDLE,
	[RC_OP_PREFETCH_PLAN] = F_BUF | F_LEN,
	[RC_OP_WRITE_OPEN] = F_DATASET | F_ARG,
	[RC_OP_WRITE] = F_HANDLE | F_OFFSET | F_LEN | F_BUF,
	[RC_OP_COMMIT] = F_HANDLE,
	[RC_OP_ABORT] = F_HANDLE,
	[RC_OP_RENAME] = F_HANDLE | F_ARG,
	[RC_OP_SYNC] = F_HANDLE | F_DATASET | F_ARG,
	[RC_OP_READ_KEY] = F_DATASET | F_ARG | F_OFFSET | F_LEN,
};
/* The SQE flag bits an opcode accepts. */
static const uint8_t op_flags[RC_OP__COUNT] = {
	[RC_OP_OPEN] = RC_OPEN_AT,
	[RC_OP_PREFETCH_PLAN] = RC_PLAN_APPEND,
	[RC_OP_READ_KEY] = RC_READ_KEY_CLOSE,
};

static uint8_t fields_read(const struct rc_sqe *e)
{
	uint8_t f = op_fields[e->opcode];
	/* Only a prefix SYNC names a dataset and a prefix. */
	if (e->opcode == RC_OP_SYNC && e->handle != RC_SYNC_PREFIX)
		f &= (uint8_t)~(F_DATASET | F_ARG);
	/* An OPEN names the handle it wants only with RC_OPEN_AT. */
	if (e->opcode == RC_OP_OPEN && (e->flags & RC_OPEN_AT))
		f |= F_HANDLE;
	return f;
}

int validate_sqe(const struct rc_sqe *e)
{
	if (e->opcode >= RC_OP__COUNT)
		return -EINVAL;
	uint8_t allowed = fields_read(e);
	if ((e->flags & ~op_flags[e->opcode]) || e->reserved0 || e->reserved1)
		return -EINVAL;
	if (!(allowed & F_ARG) && (e->arg || e->arg_len))
		return -EINVAL;
	if (!(allowed & F_HANDLE) && e->handle)
		return -EINVAL;
	if (!(allowed & F_OFFSET) && e->offset)
		return -EINVAL;
	if (!(allowed & F_LEN) && e->len)
		return -EINVAL;
	if (!(allowed & F_BUF) && (e->buf_index || e->buf_offset))
		return -EINVAL;
	if (!(allowed & F_DATASET) && e->dataset)
		return -EINVAL;
	return 0;
}

int validate_arg_slot(uint32_t arg, uint32_t arg_slots)
{
	return arg < arg_slots ? 0 : -EINVAL;
}

int validate_key(const char *key, uint32_t len)
{
	if (strlen(key) != len || key[0] == '/')
		return -EINVAL;
	for (const char *p = key; *p;) {
		const char *end = strchrnul(p, '/');
		size_t n = (size_t)(end - p);
		if ((n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return -EINVAL;
		p = *end ? end + 1 : end;
	}
	return 0;
}

int validate_key_copy(const uint8_t *args, uint32_t arg_slots, uint32_t arg,
		      uint32_t arg_len, bool allow_empty, char *key)
{
	if (validate_arg_slot(arg, arg_slots) || arg_len > RC_MAX_KEY ||
	    (arg_len == 0 && !allow_empty))
		return -EINVAL;
	memcpy(key, args + (size_t)arg * RC_ARG_SLOT_SIZE, arg_len);
	key[arg_len] = 0;
	return validate_key(key, arg_len);
}

int validate_dataset_id(uint32_t id, uint32_t n_datasets)
{
	return id < n_datasets ? 0 : -ENOENT;
}

int validate_access(bool enabled, uint32_t access, uint32_t need)
{
	if (!enabled)
		return -ENOENT;
	return (access & need) == need ? 0 : -EACCES;
}

int validate_table_id(uint32_t id, uint32_t cap)
{
	return id < cap ? 0 : -EBADF;
}

int validate_buf_index(uint32_t index)
{
	return index < VALIDATE_MAX_BUFS ? 0 : -EBADF;
}

int validate_buf_range(uint64_t offset, uint64_t len, uint64_t size)
{
	if (size == 0)
		return -EBADF;
	if (offset > size || len > size - offset)
		return -EFAULT;
	return 0;
}

int validate_regbuf_size(uint64_t size)
{
	return size == 0 || size > VALIDATE_MAX_REGBUF ? -EINVAL : 0;
}

int validate_io_len(uint64_t len)
{
	return len > RC_MAX_IO ? -EINVAL : 0;
}

int validate_list_offset(uint64_t offset)
{
	return offset >= (1ull << 32) ? -EINVAL : 0;
}

int validate_plan_len(uint64_t len)
{
	return len % sizeof(struct rc_plan_entry) ? -EINVAL : 0;
}

uint32_t validate_sq_pending(uint32_t sq_tail, uint32_t sq_head,
			     uint32_t sq_entries)
{
	uint32_t n = sq_tail - sq_head;
	return n > sq_entries ? sq_entries : n;
}

uint32_t validate_cq_room(uint32_t cq_tail, uint32_t cq_head,
			  uint32_t cq_entries)
{
	uint32_t used = cq_tail - cq_head;
	return used < cq_entries ? cq_entries - used : 0;
}

static uint32_t pow2_clamp(uint32_t v, uint32_t dflt, uint32_t max)
{
	if (v == 0)
		v = dflt;
	if (v > max)
		v = max;
	uint32_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

void validate_ring_geometry(uint32_t sq, uint32_t cq, uint32_t args,
			    struct ring_geometry *g)
{
	g->sq_entries = pow2_clamp(sq, VALIDATE_DEFAULT_SQ, VALIDATE_MAX_SQ);
	g->cq_entries = pow2_clamp(cq, 2 * g->sq_entries, 2 * VALIDATE_MAX_SQ);
	if (g->cq_entries < g->sq_entries)
		g->cq_entries = g->sq_entries;
	/* Two 32-byte CQEs at least: the arg slots after them stay 64-byte
	 * aligned, as ringcache.h promises. */
	if (g->cq_entries < 2)
		g->cq_entries = 2;
	g->arg_slots = args ? args : VALIDATE_DEFAULT_ARGS;
	if (g->arg_slots > VALIDATE_MAX_ARGS)
		g->arg_slots = VALIDATE_MAX_ARGS;
	g->sq_off = VALIDATE_RING_HDR;
	g->cq_off = g->sq_off + (uint64_t)g->sq_entries * sizeof(struct rc_sqe);
	g->arg_off = g->cq_off + (uint64_t)g->cq_entries * sizeof(struct rc_cqe);
	g->size = g->arg_off + (uint64_t)g->arg_slots * RC_ARG_SLOT_SIZE;
	g->size = (g->size + 4095) & ~4095ull;
}
