/* inifile.h - the one INI reader: the daemon's config and the AWS shared
 * credentials file. It counts lines, so every callback and every error
 * names its line; it reports every bad line and reads on, so a caller
 * can show all errors of a file in one run.
 *
 * The syntax: "[name]" headers, "name = value" or "name: value" lines;
 * leading blanks, CRLF ends and a UTF-8 byte order mark are ignored; a
 * line starting with ';' or '#' is a comment, and so is the end of a
 * line from a ';' or '#' that follows a blank. No multi-line values. */
#ifndef RC_INIFILE_H
#define RC_INIFILE_H

#include <stddef.h>
#include <stdio.h>

enum ini_fault {
	INI_FAULT_LINE,     /* not readable: a NUL byte, longer than max_line */
	INI_FAULT_SYNTAX,   /* neither a header nor name = value */
	INI_FAULT_HEADER,   /* a bad "[name]": keys after it have no section */
};

struct ini_reader {
	size_t max_line; /* longest line accepted, without blanks or end */
	/* A "[name]" header; name has no surrounding blanks. */
	void (*section)(void *user, int line, const char *name);
	/* A "name = value" line, both trimmed; value may be empty. */
	void (*key)(void *user, int line, const char *name, const char *value);
	/* A line refused. For INI_FAULT_HEADER, header is the name as far as
	 * it could be read ("" if none); otherwise NULL. what never quotes
	 * the line, which may hold a secret. */
	void (*error)(void *user, int line, enum ini_fault fault,
		      const char *header, const char *what);
};

/* Reads f to its end, calling r's callbacks in file order. Returns the
 * number of lines read, or -EIO / -ENOMEM if reading failed. The line
 * buffer is wiped before it is freed. */
int ini_read(FILE *f, const struct ini_reader *r, void *user);

#endif
