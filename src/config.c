/* config.c - placeholder */
