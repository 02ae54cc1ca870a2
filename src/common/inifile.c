/* inifile.c - the INI reader (see inifile.h): splits a file into lines,
 * headers and name = value pairs, and says which line is wrong and why.
 * What the names mean is the caller's business. */
#include "inifile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define BLANKS " \t"
#define UTF8_BOM "\xEF\xBB\xBF"

static void trim_end(char *s)
{
	size_t len = strlen(s);

	while (len > 0 && strchr(BLANKS "\r\n", s[len - 1]))
		s[--len] = '\0';
}

/* Cuts s at a ';' or '#' that follows a blank: the rest is a comment. */
static void strip_inline_comment(char *s)
{
	for (char *c = s + 1; *c; c++) {
		if ((*c == ';' || *c == '#') && (c[-1] == ' ' || c[-1] == '\t')) {
			*c = '\0';
			return;
		}
	}
}

static void read_header(const struct ini_reader *r, void *user, int line,
			char *s)
{
	char *close = strchr(s, ']');
	char *name = s + 1 + strspn(s + 1, BLANKS);
	const char *after;

	if (!close) {
		r->error(user, line, INI_FAULT_HEADER, "",
			 "section header is missing its closing ']'");
		return;
	}
	*close = '\0';
	trim_end(name);
	after = close + 1 + strspn(close + 1, BLANKS);
	/* A comment right after ']' needs no blank before it. */
	if (*after && *after != ';' && *after != '#') {
		r->error(user, line, INI_FAULT_HEADER, name,
			 "unexpected text after ']'");
		return;
	}
	r->section(user, line, name);
}

static void read_key(const struct ini_reader *r, void *user, int line,
		     char *s)
{
	char *delim = strpbrk(s, "=:");
	char *value;

	if (!delim) {
		r->error(user, line, INI_FAULT_SYNTAX, NULL,
			 "syntax error: expected '[section]', 'key = value' or a comment");
		return;
	}
	*delim = '\0';
	trim_end(s);
	value = delim + 1 + strspn(delim + 1, BLANKS);
	r->key(user, line, s, value);
}

/* One line as getline read it: n bytes, its end included. */
static void read_one(const struct ini_reader *r, void *user, int line,
		     char *s, size_t n)
{
	char what[64];

	if (n != strlen(s)) {
		r->error(user, line, INI_FAULT_LINE, NULL,
			 "line holds a NUL byte");
		return;
	}
	if (line == 1 && !strncmp(s, UTF8_BOM, 3))
		s += 3;
	s += strspn(s, BLANKS);
	trim_end(s);
	/* Refused, not split: the rest would be read as a line of its own. */
	if (strlen(s) > r->max_line) {
		snprintf(what, sizeof(what), "line is longer than %zu characters",
			 r->max_line);
		r->error(user, line, INI_FAULT_LINE, NULL, what);
		return;
	}
	if (!*s || *s == ';' || *s == '#')
		return;
	strip_inline_comment(s);
	trim_end(s);
	if (*s == '[')
		read_header(r, user, line, s);
	else if (*s)
		read_key(r, user, line, s);
}

int ini_read(FILE *f, const struct ini_reader *r, void *user)
{
	char *buf = NULL;
	size_t cap = 0;
	ssize_t n;
	int line = 0, rc;

	for (;;) {
		errno = 0; /* callbacks may leave one behind */
		n = getline(&buf, &cap, f);
		if (n < 0)
			break;
		read_one(r, user, ++line, buf, (size_t)n);
	}
	if (errno == ENOMEM)
		rc = -ENOMEM;
	else
		rc = ferror(f) ? -EIO : line;
	if (buf)
		explicit_bzero(buf, cap);
	free(buf);
	return rc;
}
