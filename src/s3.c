/* s3.c - placeholder */
