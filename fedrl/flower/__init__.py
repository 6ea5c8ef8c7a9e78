"""Everything that knows Flower: wire codecs, the server loop, the client handler."""
