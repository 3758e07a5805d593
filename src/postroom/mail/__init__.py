"""Pure mail functions: bytes in, values out (parsing, addresses, bodies, threading keys,
references, verification codes). Nothing here imports ``store/`` or a network library."""
