"""Watching the API: informers, Lease leader election, the client's connection pool, rate limit."""
