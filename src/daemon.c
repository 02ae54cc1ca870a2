/* daemon.c - placeholder */
