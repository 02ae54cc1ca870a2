/* cache.c - placeholder */
