/* reactor.c - placeholder */
