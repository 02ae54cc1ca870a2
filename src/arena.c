/* arena.c - placeholder */
