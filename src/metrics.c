/* metrics.c - placeholder */
