/* sigv4.c - placeholder */
