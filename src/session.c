/* session.c - placeholder */
