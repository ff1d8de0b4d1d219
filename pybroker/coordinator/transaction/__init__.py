"""The transaction coordinator (KIP-98): transactional ids, their producer ids and epochs, and the
two-phase commit that ends a transaction with markers on every partition it wrote to."""
