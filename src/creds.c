/* creds.c - placeholder */
