/* list.h - the one intrusive doubly linked list (as the Linux kernel's and
 * libuv's queue): a struct rc_list member in each element, a struct
 * rc_list head that is its own sentinel.
 *
 * Ownership: the list owns nothing; an element is on at most one list per
 * member. Use: rc_list_init the head (or RC_LIST_INIT), add, delete in
 * O(1) from anywhere, walk with rc_list_for_each_safe when the body may
 * delete the element it is on. rc_list_del leaves the element linked to
 * itself, so deleting twice and rc_list_linked are safe. */
#ifndef RC_LIST_H
#define RC_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct rc_list {
	struct rc_list *next, *prev;
};

#define RC_LIST_INIT(head) { &(head), &(head) }

#define rc_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#define rc_list_entry(node, type, member) rc_container_of(node, type, member)

static inline void rc_list_init(struct rc_list *l)
{
	l->next = l->prev = l;
}

static inline bool rc_list_empty(const struct rc_list *head)
{
	return head->next == head;
}

/* An element: whether it is on a list (needs rc_list_init or a del). */
static inline bool rc_list_linked(const struct rc_list *n)
{
	return n->next != n;
}

static inline void rc_list_insert_between(struct rc_list *n,
					  struct rc_list *prev,
					  struct rc_list *next)
{
	n->prev = prev;
	n->next = next;
	prev->next = n;
	next->prev = n;
}

static inline void rc_list_add(struct rc_list *head, struct rc_list *n)
{
	rc_list_insert_between(n, head, head->next);
}

static inline void rc_list_add_tail(struct rc_list *head, struct rc_list *n)
{
	rc_list_insert_between(n, head->prev, head);
}

static inline void rc_list_del(struct rc_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	rc_list_init(n);
}

/* Moves every element of src, in order, to the end of dst; src is left
 * empty. (A queue taken whole under a lock, worked on outside it.) */
static inline void rc_list_splice_tail(struct rc_list *dst, struct rc_list *src)
{
	if (rc_list_empty(src))
		return;
	src->next->prev = dst->prev;
	dst->prev->next = src->next;
	src->prev->next = dst;
	dst->prev = src->prev;
	rc_list_init(src);
}

static inline struct rc_list *rc_list_first(const struct rc_list *head)
{
	return rc_list_empty(head) ? NULL : head->next;
}

#define rc_list_for_each(pos, head) \
	for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

#define rc_list_for_each_safe(pos, tmp, head)                          \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); \
	     (pos) = (tmp), (tmp) = (pos)->next)

#endif
