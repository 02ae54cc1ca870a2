/* client.c - placeholder */
